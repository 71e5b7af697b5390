import { buildApp } from './app.ts';
import { ConfigError, loadConfig } from './config.ts';
import { DataDirLockedError } from './db/data-dir-lock.ts';
import { openDatabase } from './db/database.ts';
import { migrateToLatest } from './db/migrate.ts';

/** Starts the service: config, database, migrations, app, listen; closes everything on SIGINT/SIGTERM. */
async function main(): Promise<void> {
  const config = loadConfig();
  const database = await openDatabase(config.database);
  let app: Awaited<ReturnType<typeof buildApp>> | undefined;
  try {
    await migrateToLatest(database.db);
    app = await buildApp(config, { database });
    await app.listen({ port: config.port, host: config.host });
  } catch (err) {
    await app?.close().catch(() => {});
    await database.close().catch(() => {});
    throw err;
  }

  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) {
      app?.log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    app?.log.info({ signal }, 'shutting down: finishing in-flight requests');
    // Fastify stops accepting, lets in-flight requests finish, then the database closes.
    void (async () => {
      try {
        await app?.close();
        await database.close();
        process.exit(0);
      } catch (err) {
        app?.log.error({ err }, 'shutdown failed');
        process.exit(1);
      }
    })();
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch((err: unknown) => {
  if (err instanceof ConfigError || err instanceof DataDirLockedError) {
    console.error(`Cannot start: ${err.message}`);
  } else {
    console.error('Cannot start:', err);
  }
  process.exit(1);
});
