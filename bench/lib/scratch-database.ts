import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';

/** A new, empty database for a benchmarked service: the environment that names it, and how to drop it. */
export interface ScratchDatabase {
  env: Record<string, string>;
  drop: () => Promise<void>;
  /** The directory (PGlite) or the database's name (PostgreSQL). */
  label: string;
}

/**
 * A new PGlite directory under the system's temporary folder, or a new database named
 * `<prefix>_<random>` beside the one DATABASE_URL names (postgres://postgres@127.0.0.1:5432/postgres
 * by default; loopback only).
 */
export async function newScratchDatabase(kind: 'pglite' | 'postgres', prefix: string): Promise<ScratchDatabase> {
  if (kind === 'pglite') {
    const dir = mkdtempSync(path.join(os.tmpdir(), `${prefix.replaceAll('_', '-')}-`));
    return { env: { DATA_DIR: dir }, drop: async () => rmSync(dir, { recursive: true, force: true }), label: dir };
  }
  const serverUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const host = new URL(serverUrl).hostname;
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(host)) throw new Error(`refusing ${host}: loopback only`);
  const name = `${prefix}_${randomBytes(4).toString('hex')}`;
  const admin = async (statement: string) => {
    const client = new pg.Client({ connectionString: serverUrl });
    await client.connect();
    try {
      await client.query(statement);
    } finally {
      await client.end();
    }
  };
  await admin(`create database ${name}`);
  const url = Object.assign(new URL(serverUrl), { pathname: `/${name}` }).toString();
  return { env: { DATABASE_URL: url }, drop: () => admin(`drop database if exists ${name} with (force)`), label: name };
}
