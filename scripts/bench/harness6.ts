// The IPv6 twin of harness.ts's packet sets and services, for bench-datapath's IPv6 rows (issue
// 19 point 7): the same scenarios — VIP i:80/TCP with 3 backends, flow f from client f — with
// 128-bit addresses, 60-byte IPv6/TCP packets (no extension header) in the same 64-byte slots,
// timed by harness.ts's loops (runSet, runCopyOnly take the set's packet length).
//
//   VIP i        fd00:10:96::<i>           backend (i, k)  fd00:10:244::<3i+k>
//   client f     fd00:10:1::<f >> 14>      port            1024 + (f & 0x3fff)
//
// Not part of bench-ab's copy set: an A/B against a revision runs the IPv4 scenarios only.

import { l4v6FillCsum } from '../../src/wire/checksum6.ts';
import {
  BACKENDS_PER_SVC,
  type Datapath,
  datapathFor,
  type PacketSet,
  packetSet,
  seedInto,
  sportOf,
} from './harness.ts';

export const PKT6 = 60; // IPv6 + TCP, no extension header, no option

const VIP6 = [0xfd000010 | 0, 0x00960000, 0, 0];
const BE6 = [0xfd000010 | 0, 0x02440000, 0, 0];
const CLIENT6 = [0xfd000010 | 0, 0x00010000, 0, 0];

function words(base: number[], low: number): Int32Array {
  return Int32Array.of(base[0]!, base[1]!, base[2]!, low | 0);
}
export const vip6Of = (i: number) => words(VIP6, i);
export const be6Of = (i: number, k: number) => words(BE6, i * BACKENDS_PER_SVC + k);
export const client6Of = (f: number) => words(CLIENT6, f >>> 14);

function w16(b: Uint8Array, at: number, v: number): void {
  b[at] = v >>> 8;
  b[at + 1] = v;
}
function wAddr(b: Uint8Array, at: number, a: ArrayLike<number>): void {
  for (let k = 0; k < 4; k++) {
    w16(b, at + 4 * k, (a[k]! >>> 16) & 0xffff);
    w16(b, at + 4 * k + 2, a[k]! & 0xffff);
  }
}

/** A 60-byte IPv6/TCP packet with a valid checksum at b[off..off+60). */
export function writeTcp6(
  b: Uint8Array,
  off: number,
  src: ArrayLike<number>,
  dst: ArrayLike<number>,
  sport: number,
  dport: number,
  flags: number,
): void {
  b.fill(0, off, off + PKT6);
  b[off] = 0x60;
  w16(b, off + 4, PKT6 - 40);
  b[off + 6] = 6;
  b[off + 7] = 64;
  wAddr(b, off + 8, src);
  wAddr(b, off + 24, dst);
  const t = off + 40;
  w16(b, t, sport);
  w16(b, t + 2, dport);
  w16(b, t + 4, 0);
  w16(b, t + 6, 1000);
  b[t + 12] = 5 << 4;
  b[t + 13] = flags;
  w16(b, t + 14, 64240);
  l4v6FillCsum(b, off, t, off + PKT6, 6);
}

/** A datapath with `services` IPv6 services seeded into its IPv6 maps (harness.ts's shape). */
export function datapathFor6(services: number, ctCapacity: number): Datapath {
  return datapathFor(services, ctCapacity, (dp, n) => seedInto(dp.svc6, dp.be6, n, vip6Of, be6Of));
}

/** n SYNs of new flows, flow f toward VIP (f * 7919) % services:80 (synSet's order). */
export function synSet6(services: number, n: number): PacketSet {
  return packetSet(
    n,
    (b, off, f) =>
      writeTcp6(b, off, client6Of(f), vip6Of((f * 7919) % services), sportOf(f), 80, 2),
    PKT6,
  );
}

/** Flow f of an established run: client f -> VIP (f % services):80. */
export function flowSet6(services: number, flows: number, flags: number): PacketSet {
  return packetSet(
    flows,
    (b, off, f) => writeTcp6(b, off, client6Of(f), vip6Of(f % services), sportOf(f), 80, flags),
    PKT6,
  );
}

/** The replies of flowSet6's flows, from whichever backend each flow was given. */
export function replySet6(dp: Datapath, services: number, flows: number): PacketSet {
  const a = new Int32Array(8);
  return packetSet(
    flows,
    (b, off, f) => {
      a.set(client6Of(f), 0);
      a.set(vip6Of(f % services), 4);
      const i = dp.ct6.lookupOrig6(6, a, 0, 4, sportOf(f), 80);
      const be = [0, 1, 2, 3].map((k) => dp.ct6.baddrWord(i, k));
      writeTcp6(b, off, be, client6Of(f), 8080, sportOf(f), 16);
    },
    PKT6,
  );
}
