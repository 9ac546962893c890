// Chain names as kube-proxy computes them. iptables chain names are limited to 28 characters,
// so kube-proxy hashes the service port name (and endpoint) with SHA-256, encodes the digest
// in RFC 4648 base32 (standard alphabet, with padding) and keeps the first 16 characters.
// The same names must come out here byte for byte, or our dumps cannot be diffed against a
// real node's.

import { createHash } from 'node:crypto';

const B32_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

/** RFC 4648 section 6 base32 ("StdEncoding"), '=' padded to a multiple of 8 characters. */
export function base32Std(data: Uint8Array): string {
  let out = '';
  let acc = 0;
  let bits = 0;
  for (let i = 0; i < data.length; i++) {
    acc = ((acc << 8) | data[i]) & 0xffff;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out += B32_ALPHABET[(acc >>> bits) & 31];
    }
  }
  if (bits > 0) out += B32_ALPHABET[(acc << (5 - bits)) & 31];
  while (out.length % 8 !== 0) out += '=';
  return out;
}

function hash16(text: string): string {
  const digest = createHash('sha256').update(text, 'utf8').digest();
  return base32Std(digest).slice(0, 16);
}

/** kube-proxy's portProtoHash: `servicePortName` as "ns/name[:port]", protocol lowercase. */
export function portProtoHash(servicePortName: string, protocol: string): string {
  return hash16(servicePortName + protocol.toLowerCase());
}

export function svcChainName(spn: string, protocol: string): string {
  return `KUBE-SVC-${portProtoHash(spn, protocol)}`;
}

export function svlChainName(spn: string, protocol: string): string {
  return `KUBE-SVL-${portProtoHash(spn, protocol)}`;
}

export function extChainName(spn: string, protocol: string): string {
  return `KUBE-EXT-${portProtoHash(spn, protocol)}`;
}

export function fwChainName(spn: string, protocol: string): string {
  return `KUBE-FW-${portProtoHash(spn, protocol)}`;
}

/** `endpoint` is "ip:port" ("[v6]:port" for IPv6), exactly as kube-proxy prints it. */
export function sepChainName(spn: string, protocol: string, endpoint: string): string {
  return `KUBE-SEP-${hash16(spn + protocol.toLowerCase() + endpoint)}`;
}

// nftables mode (pkg/proxy/nftables): chain names carry the readable service port name,
// prefixed with 8 characters of its own hash so near-identical names stay distinguishable
// ("ULMVA6XW-ns1/svc1/tcp/p80"), truncated to 240 characters (256 minus the longest prefix).
const NFT_NAME_BASE_MAX = 256 - 16;

export function nftHashAndTruncate(name: string): string {
  const digest = createHash('sha256').update(name, 'utf8').digest();
  const out = `${base32Std(digest).slice(0, 8)}-${name}`;
  return out.length > NFT_NAME_BASE_MAX ? `${out.slice(0, NFT_NAME_BASE_MAX - 3)}...` : out;
}

/** "HASH-ns/name/proto/portName" for service, local, external and firewall chains. */
export function nftServiceNameBase(
  ns: string,
  name: string,
  portName: string,
  protocol: string,
): string {
  return nftHashAndTruncate(`${ns}/${name}/${protocol.toLowerCase()}/${portName}`);
}

/** "HASH-ns/name/proto/portName__ip/port" for endpoint chains and affinity sets. */
export function nftEndpointNameBase(
  ns: string,
  name: string,
  portName: string,
  protocol: string,
  ip: string,
  port: number,
): string {
  // Colons are not allowed in nftables names; an IPv6 endpoint uses dots instead.
  const host = ip.replaceAll(':', '.');
  return nftHashAndTruncate(`${ns}/${name}/${protocol.toLowerCase()}/${portName}__${host}/${port}`);
}
