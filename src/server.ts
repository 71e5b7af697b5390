// Starts the service (`npm start` runs it through src/start.mjs, which turns Node's compile cache on
// first; `node src/server.ts` works as well, only without the cache).
import { buildApp } from './app.ts';
import { type Config, ConfigError, loadConfig } from './config.ts';
import { DataDirLockedError } from './db/data-dir-lock.ts';
import { openDatabase } from './db/database.ts';
import { migrateToLatest } from './db/migrate.ts';
import { serveDatabaseToPsql } from './db/pglite-wire.ts';
import { listenForMetrics } from './metrics/listener.ts';
import { describeStartFailure } from './start-failure.ts';

let config: Config | undefined;

/** Starts the service: config, database, migrations, app, listen; closes everything on SIGINT/SIGTERM. */
async function main(): Promise<void> {
  config = loadConfig();
  const database = await openDatabase(config.database);
  let app: Awaited<ReturnType<typeof buildApp>> | undefined;
  try {
    await migrateToLatest(database.db);
    app = await buildApp(config, { database });
    await serveDatabaseToPsql(app, config, database); // PGLITE_SOCKET_PORT; closes with the app
    await app.listen({ port: config.port, host: config.host });
    await listenForMetrics(app, config); // METRICS_PORT; closes with the app's server
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
  // A promise some library left unhandled (one client's malformed input meeting a bug) would end the
  // process and every connection on it: it is logged, and the service goes on.
  process.on('unhandledRejection', (reason) => {
    app?.log.error({ err: reason }, 'unhandled promise rejection; the service goes on');
  });
}

main().catch((err: unknown) => {
  const known = err instanceof ConfigError || err instanceof DataDirLockedError ? err.message : undefined;
  const line = known ?? (config && describeStartFailure(err, config));
  if (line) console.error(`Cannot start: ${line}`);
  else console.error('Cannot start:', err);
  process.exit(1);
});
