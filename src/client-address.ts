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

/** A client address as the limits count it: `network` (per-IP limits) inside `group` (its wider network). */
export interface AddressNetworks {
  /** IPv4: the address; IPv6: its first `ipv6Prefix` bits (`2001:db8:0:100::/56`). */
  network: string;
  /** IPv4: its /24; IPv6: its /48 (or the network itself, when that is wider). */
  group: string;
}

/** The eight 16-bit groups of an IPv6 address, or undefined when it is not one. */
function ipv6Groups(address: string): number[] | undefined {
  const text = address.replace(/%.*$/, '');
  if (!/^[0-9a-fA-F:.]+$/.test(text) || !text.includes(':')) return undefined;
  const parts = text.split('::');
  if (parts.length > 2) return undefined;
  const side = (s: string | undefined): number[] | undefined => {
    if (s === undefined || s === '') return [];
    const out: number[] = [];
    const pieces = s.split(':');
    for (const [i, piece] of pieces.entries()) {
      if (piece.includes('.') && i === pieces.length - 1) {
        const v4 = ipv4Octets(piece);
        if (v4 === undefined) return undefined;
        out.push(((v4[0] as number) << 8) | (v4[1] as number), ((v4[2] as number) << 8) | (v4[3] as number));
      } else if (/^[0-9a-fA-F]{1,4}$/.test(piece)) out.push(Number.parseInt(piece, 16));
      else return undefined;
    }
    return out;
  };
  const head = side(parts[0]);
  const tail = side(parts[1]);
  if (head === undefined || tail === undefined) return undefined;
  if (parts.length === 1) return head.length === 8 ? head : undefined;
  const missing = 8 - head.length - tail.length;
  return missing >= 1 ? [...head, ...new Array<number>(missing).fill(0), ...tail] : undefined;
}

function ipv4Octets(address: string): number[] | undefined {
  if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(address)) return undefined;
  const octets = address.split('.').map(Number);
  return octets.every((o) => o <= 255) ? octets : undefined;
}

/** The first `bits` bits of an IPv6 address, written as a network (`2001:db8:0:100::/56`). */
function ipv6Network(groups: readonly number[], bits: number): string {
  const masked = groups.map((g, i) => {
    const keep = Math.max(0, Math.min(16, bits - i * 16));
    return keep === 0 ? 0 : g & (0xffff << (16 - keep)) & 0xffff;
  });
  return `${masked.map((g) => g.toString(16)).join(':')}/${bits}`;
}

/**
 * The networks a client address belongs to. A home or office gets a whole IPv6 prefix (commonly a
 * /56, at most a /48) and picks addresses in it at will, so IPv6 clients are counted by their
 * first `ipv6Prefix` bits; an IPv4 client (IPv4-mapped IPv6 included) by its address.
 */
export function addressNetworks(address: string, ipv6Prefix: number): AddressNetworks {
  const v4 = ipv4Octets(address.replace(/^::ffff:/i, ''));
  if (v4 !== undefined) return { network: v4.join('.'), group: `${v4.slice(0, 3).join('.')}.0/24` };
  const groups = ipv6Groups(address);
  if (groups === undefined) return { network: address, group: address };
  if (groups.slice(0, 6).join(',') === '0,0,0,0,0,65535') {
    const mapped = [groups[6] as number, groups[7] as number].flatMap((g) => [g >> 8, g & 0xff]);
    return { network: mapped.join('.'), group: `${mapped.slice(0, 3).join('.')}.0/24` };
  }
  return { network: ipv6Network(groups, ipv6Prefix), group: ipv6Network(groups, Math.min(48, ipv6Prefix)) };
}
