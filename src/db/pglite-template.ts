import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';

// initdb inside WebAssembly takes seconds; loading a dump of a freshly initialised cluster takes
// a fraction of that. The dump is made once per installed PGlite version (npm install runs
// `prepare`), kept under node_modules/.cache, and used whenever an empty database is created.
function findPackageRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.resolve('@electric-sql/pglite')));
  while (!existsSync(path.join(dir, 'package.json')) || !dir.endsWith(path.join('@electric-sql', 'pglite'))) {
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error('cannot locate @electric-sql/pglite');
    dir = parent;
  }
  return dir;
}

const pgliteRoot = findPackageRoot();
const pgliteVersion = (JSON.parse(readFileSync(path.join(pgliteRoot, 'package.json'), 'utf8')) as { version: string })
  .version;

/** node_modules/.cache/pglite-template/empty-cluster-<version>.tar.gz */
export const templateFile = path.resolve(
  pgliteRoot,
  '..',
  '..',
  '.cache',
  'pglite-template',
  `empty-cluster-${pgliteVersion}.tar.gz`,
);

/** The dump of an empty cluster for this PGlite version, if one has been made. */
export function readTemplate(): Blob | undefined {
  if (!existsSync(templateFile)) return undefined;
  return new Blob([readFileSync(templateFile)]);
}

/** Makes the dump (idempotent; written atomically so that a concurrent reader never sees half a file). */
export async function writeTemplate(): Promise<string> {
  if (existsSync(templateFile)) return templateFile;
  const pglite = await PGlite.create();
  try {
    const dump = await pglite.dumpDataDir('gzip');
    mkdirSync(path.dirname(templateFile), { recursive: true });
    const partial = `${templateFile}.${process.pid}.partial`;
    writeFileSync(partial, Buffer.from(await dump.arrayBuffer()));
    renameSync(partial, templateFile);
  } finally {
    await pglite.close();
  }
  return templateFile;
}
