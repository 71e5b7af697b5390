import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { type Config, ConfigError } from '../config.ts';
import { errorBody } from '../errors.ts';

/** The metrics port, while it is open. */
export interface MetricsListener {
  port: number;
  close(): Promise<void>;
}

/**
 * With METRICS_PORT, serves `GET /metrics` of `app` on that port, on HOST, without a token (the
 * port is meant for a network only Prometheus reaches); anything else there is a 404 in the Error
 * shape. Call it after `app.listen`; the port closes with the app's server, or with `close()`.
 * Resolves to undefined without METRICS_PORT; rejects with a one-line ConfigError when the port
 * cannot be opened.
 */
export async function listenForMetrics(
  app: FastifyInstance,
  config: Readonly<Pick<Config, 'host' | 'metrics' | 'http'>>,
): Promise<MetricsListener | undefined> {
  const metrics = app.metrics;
  if (config.metrics.port === undefined || metrics === null) return undefined;
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const headers = { 'x-content-type-options': 'nosniff', 'cache-control': 'no-store' };
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      const body = errorBody('NOT_FOUND', `No route for ${req.method} ${path}`);
      res.writeHead(404, { ...headers, 'content-type': 'application/json; charset=utf-8' });
      res.end(JSON.stringify(body));
      return;
    }
    metrics.render().then(
      (text) => {
        res.writeHead(200, { ...headers, 'content-type': metrics.contentType });
        res.end(req.method === 'HEAD' ? undefined : text);
      },
      (err: unknown) => {
        app.log.error({ err }, 'metrics: collecting failed');
        const body = errorBody('INTERNAL_ERROR', 'Internal server error');
        res.writeHead(500, { ...headers, 'content-type': 'application/json; charset=utf-8' });
        res.end(JSON.stringify(body));
      },
    );
  });
  server.headersTimeout = config.http.headersTimeoutMs;
  server.requestTimeout = config.http.requestTimeoutMs;
  await new Promise<void>((resolve, reject) => {
    const refused = (err: NodeJS.ErrnoException) => {
      const where = `METRICS_PORT ${config.metrics.port} on ${config.host}`;
      const why =
        err.code === 'EADDRINUSE'
          ? 'address already in use'
          : err.code === 'EACCES'
            ? 'permission denied'
            : err.message;
      reject(new ConfigError(`${where} cannot be opened (${why}): set METRICS_PORT to a free port`));
    };
    server.once('error', refused);
    server.listen({ port: config.metrics.port, host: config.host }, () => {
      server.off('error', refused);
      resolve();
    });
  });
  server.on('error', (err) => app.log.error({ err }, 'metrics: port error'));
  const close = async () => {
    if (!server.listening) return;
    server.closeAllConnections();
    server.close();
    await once(server, 'close');
  };
  app.server.once('close', () => void close());
  const { port } = server.address() as AddressInfo;
  app.log.info({ port, host: config.host }, 'metrics: serving GET /metrics on the metrics port');
  return { port, close };
}
