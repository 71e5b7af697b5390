import type { IncomingMessage } from 'node:http';
import proxyAddr from '@fastify/proxy-addr';
import type { Config } from './config.ts';

/** Which hops to believe in X-Forwarded-For (TRUST_PROXY), as the function Fastify and the socket handshake both use. */
export function proxyTrust(trustProxy: Config['trustProxy']): (address: string, hop: number) => boolean {
  if (trustProxy === false) return () => false;
  if (typeof trustProxy === 'number') return (_address, hop) => hop < trustProxy;
  return proxyAddr.compile(trustProxy.split(',').map((s) => s.trim()));
}

/** The client's address of a request, as Fastify's `request.ip` gives it. */
export function clientAddress(request: IncomingMessage, trust: (address: string, hop: number) => boolean): string {
  return proxyAddr(request, trust);
}
