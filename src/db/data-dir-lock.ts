import fs from 'node:fs';
import path from 'node:path';

/** Thrown when another live process (or this one) already has the embedded database open. */
export class DataDirLockedError extends Error {
  override name = 'DataDirLockedError';
}

const heldByThisProcess = new Set<string>();

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes an exclusive lock on a database directory through a sibling file `<dir>.lock` that holds
 * this process id. A lock left by a process that no longer runs is taken over (a container that
 * restarts may get the same pid again, so our own pid counts as stale unless we hold it now).
 * Returns the function that releases the lock.
 */
export function lockDataDir(dir: string): () => void {
  const resolved = path.resolve(dir);
  const file = `${resolved}.lock`;
  if (heldByThisProcess.has(resolved)) {
    throw new DataDirLockedError(`The embedded database in ${resolved} is already open in this process.`);
  }
  fs.mkdirSync(path.dirname(resolved), { recursive: true });
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      fs.writeFileSync(file, String(process.pid), { flag: 'wx' });
      heldByThisProcess.add(resolved);
      return () => {
        heldByThisProcess.delete(resolved);
        try {
          if (fs.readFileSync(file, 'utf8') === String(process.pid)) fs.unlinkSync(file);
        } catch {
          // already gone
        }
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const holder = Number.parseInt(readOrEmpty(file), 10);
      // An empty lock file that is only just created belongs to a process that is still writing its pid.
      const beingWritten = Number.isNaN(holder) && Date.now() - mtimeOrZero(file) < 2000;
      if (beingWritten || (holder !== process.pid && isAlive(holder))) {
        throw new DataDirLockedError(
          `The embedded database in ${resolved} is in use by ${beingWritten ? 'another process' : `process ${holder}`}. Stop that process, or give this one another DATA_DIR (or a DATABASE_URL) to run a second instance.`,
        );
      }
      fs.rmSync(file, { force: true }); // stale: its process is gone
    }
  }
  throw new DataDirLockedError(`Could not lock ${file}`);
}

function readOrEmpty(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

function mtimeOrZero(file: string): number {
  try {
    return fs.statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}
