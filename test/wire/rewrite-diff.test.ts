// Seeded randomized differential test: every RFC 1624 incremental rewrite in rewrite.ts must
// leave exactly the checksums a full recompute (checksum.ts) would store — IPv4 header, TCP,
// UDP (with its zero rules) and ICMP echo. Fixed seed, so a failure replays; the first few
// failing cases are printed with their bytes.
import { describe, expect, it } from 'vitest';
import { csumFold, ipv4HeaderChecksum, l4ChecksumFull, l4FillCsum } from '../../src/wire/checksum.ts';
import { ipv4Csum, ipv4FillCsum } from '../../src/wire/ipv4.ts';
import {
  icmpRewriteEchoId,
  ipv4RewriteDst,
  ipv4RewriteSrc,
  l4RewriteDstPort,
  l4RewriteSrcPort,
} from '../../src/wire/rewrite.ts';
import { hex, mulberry32 } from './helpers.ts';

const SEED = 0x6b756265;
// 14 TCP/UDP combos x 12k + UDP zero-rule cases + 10k ICMP: about 212k cases in all.
const PER_COMBO = 12_000;

const OP_SRC_ADDR = 0;
const OP_DST_ADDR = 1;
const OP_SRC_PORT = 2;
const OP_DST_PORT = 3;
const OP_DNAT = 4; // dst addr + dst port
const OP_SNAT = 5; // src addr + src port
const OP_ALL = 6; // all four
const OP_NAMES = ['src addr', 'dst addr', 'src port', 'dst port', 'dst addr+port', 'src addr+port', 'all four'];

// UDP checksum modes
const UDP_NORMAL = 0;
const UDP_NONE = 1; // stored 0: must stay 0
const UDP_FFFF_AFTER = 2; // payload tuned so the rewritten datagram computes to 0 -> 0xffff
const UDP_FFFF_BEFORE = 3; // payload tuned so the original computes to 0 -> stored 0xffff

type Rng = () => number;

// One backing store; the packet lives at an odd byteOffset plus a random ipOff.
const big = new Uint8Array(4096);
const buf = big.subarray(3);
const ref = new Uint8Array(4096);

function int(rng: Rng, n: number): number {
  return Math.floor(rng() * n);
}

/** Random well-formed IPv4 + TCP/UDP/ICMP packet at ipOff with correct checksums; its length. */
function build(rng: Rng, ipOff: number, proto: number): number {
  const ihl = rng() < 0.75 ? 5 : 5 + int(rng, 11);
  const l4h = proto === 6 ? 20 + 4 * int(rng, 11) : 8;
  const payload = rng() < 0.85 ? int(rng, 64) : int(rng, 1461);
  const total = ihl * 4 + l4h + payload;
  for (let i = 0; i < total; i++) buf[ipOff + i] = int(rng, 256);
  buf[ipOff] = 0x40 | ihl;
  buf[ipOff + 2] = total >>> 8;
  buf[ipOff + 3] = total & 0xff;
  buf[ipOff + 6] = rng() < 0.5 ? 0x40 : 0; // DF or not; never a fragment here
  buf[ipOff + 7] = 0;
  buf[ipOff + 9] = proto;
  const l4 = ipOff + ihl * 4;
  if (proto === 6) buf[l4 + 12] = (l4h / 4) << 4;
  if (proto === 17) {
    buf[l4 + 4] = (l4h + payload) >>> 8;
    buf[l4 + 5] = (l4h + payload) & 0xff;
  }
  if (proto === 1) buf[l4] = 8;
  ipv4FillCsum(buf, ipOff);
  l4FillCsum(buf, ipOff);
  return total;
}

function apply(rng: Rng, ipOff: number, op: number, same: boolean): void {
  const l4 = ipOff + (buf[ipOff] & 0x0f) * 4;
  const a = () => (same ? -1 : (int(rng, 0x10000) * 0x10000 + int(rng, 0x10000)) >>> 0);
  const p = () => (same ? -1 : int(rng, 0x10000));
  const keep32 = (at: number) => ((buf[at] << 24) | (buf[at + 1] << 16) | (buf[at + 2] << 8) | buf[at + 3]) >>> 0;
  const keep16 = (at: number) => (buf[at] << 8) | buf[at + 1];
  const srcA = a();
  const dstA = a();
  const srcP = p();
  const dstP = p();
  const sa = srcA < 0 ? keep32(ipOff + 12) : srcA;
  const da = dstA < 0 ? keep32(ipOff + 16) : dstA;
  const sp = srcP < 0 ? keep16(l4) : srcP;
  const dp = dstP < 0 ? keep16(l4 + 2) : dstP;
  if (op === OP_SRC_ADDR || op === OP_SNAT || op === OP_ALL) ipv4RewriteSrc(buf, ipOff, sa);
  if (op === OP_DST_ADDR || op === OP_DNAT || op === OP_ALL) ipv4RewriteDst(buf, ipOff, da);
  if (op === OP_SRC_PORT || op === OP_SNAT || op === OP_ALL) l4RewriteSrcPort(buf, ipOff, sp);
  if (op === OP_DST_PORT || op === OP_DNAT || op === OP_ALL) l4RewriteDstPort(buf, ipOff, dp);
}

/**
 * Tune the first payload word so that the UDP datagram, after `op`, computes to 0. Replays the
 * op on a copy with a cloned RNG state: returns false if the payload is too short.
 */
function tuneForZeroAfter(seed: number, ipOff: number, len: number, op: number): boolean {
  const l4 = ipOff + (buf[ipOff] & 0x0f) * 4;
  if (len - (l4 - ipOff) < 10) return false;
  ref.set(buf.subarray(ipOff, ipOff + len));
  apply(mulberry32(seed), ipOff, op, false);
  const c = l4ChecksumFull(buf, ipOff);
  buf.set(ref.subarray(0, len), ipOff);
  if (c === 0xffff) return true;
  // Adding c to the sum makes ~sum == 0: carry it in the first payload word.
  const w = csumFold(((buf[l4 + 8] << 8) | buf[l4 + 9]) + c);
  buf[l4 + 8] = w >>> 8;
  buf[l4 + 9] = w & 0xff;
  l4FillCsum(buf, ipOff);
  return true;
}

function tuneForZeroBefore(ipOff: number, len: number): boolean {
  const l4 = ipOff + (buf[ipOff] & 0x0f) * 4;
  if (len - (l4 - ipOff) < 10) return false;
  const c = l4ChecksumFull(buf, ipOff);
  if (c === 0xffff) return true;
  const w = csumFold(((buf[l4 + 8] << 8) | buf[l4 + 9]) + c);
  buf[l4 + 8] = w >>> 8;
  buf[l4 + 9] = w & 0xff;
  l4FillCsum(buf, ipOff);
  return l4ChecksumFull(buf, ipOff) === 0xffff;
}

interface Tally {
  cases: number;
  failures: string[];
  ffffSeen: number;
}

function stored(ipOff: number, proto: number): number {
  const at = ipOff + (buf[ipOff] & 0x0f) * 4 + (proto === 6 ? 16 : proto === 17 ? 6 : 2);
  return (buf[at] << 8) | buf[at + 1];
}

function runCase(rng: Rng, proto: number, op: number, mode: number, t: Tally): void {
  const ipOff = int(rng, 6);
  const len = build(rng, ipOff, proto);
  const opSeed = int(rng, 0x7fffffff);
  const same = mode === UDP_FFFF_BEFORE && rng() < 0.25;
  if (mode === UDP_NONE) {
    buf[ipOff + (buf[ipOff] & 0x0f) * 4 + 6] = 0;
    buf[ipOff + (buf[ipOff] & 0x0f) * 4 + 7] = 0;
  }
  if (mode === UDP_FFFF_AFTER && !tuneForZeroAfter(opSeed, ipOff, len, op)) return;
  if (mode === UDP_FFFF_BEFORE && !tuneForZeroBefore(ipOff, len)) return;
  const before = hex(buf.subarray(ipOff, ipOff + len));
  apply(mulberry32(opSeed), ipOff, op, same);
  t.cases++;
  const ipOk = ipv4Csum(buf, ipOff) === ipv4HeaderChecksum(buf, ipOff);
  const got = stored(ipOff, proto);
  const want = mode === UDP_NONE ? 0 : l4ChecksumFull(buf, ipOff);
  if (got === 0xffff && proto === 17) t.ffffSeen++;
  if ((!ipOk || got !== want) && t.failures.length < 5) {
    t.failures.push(`op=${OP_NAMES[op]} mode=${mode} ip=${ipOk} l4 got=${got} want=${want} pkt=${before}`);
  }
}

function run(proto: number, op: number, mode: number, n: number, seed: number): Tally {
  const rng = mulberry32(seed);
  const t: Tally = { cases: 0, failures: [], ffffSeen: 0 };
  for (let i = 0; i < n; i++) runCase(rng, proto, op, mode, t);
  return t;
}

let total = 0;

describe('incremental rewrite == full recompute (seeded)', () => {
  for (const [proto, name] of [
    [6, 'TCP'],
    [17, 'UDP'],
  ] as const) {
    for (let op = 0; op < OP_NAMES.length; op++) {
      it(`${name}: ${OP_NAMES[op]}`, () => {
        const t = run(proto, op, UDP_NORMAL, PER_COMBO, SEED + proto * 100 + op);
        total += t.cases;
        expect(t.failures).toEqual([]);
        expect(t.cases).toBe(PER_COMBO);
      });
    }
  }

  it('UDP checksum 0 ("none") stays 0 through every rewrite', () => {
    let cases = 0;
    for (let op = 0; op < OP_NAMES.length; op++) {
      const t = run(17, op, UDP_NONE, 2000, SEED ^ (0x100 + op));
      expect(t.failures).toEqual([]);
      cases += t.cases;
    }
    total += cases;
    expect(cases).toBe(2000 * OP_NAMES.length);
  });

  it('UDP rewrite whose result computes to 0 stores 0xffff, as a full recompute does', () => {
    let cases = 0;
    let ffff = 0;
    for (let op = 0; op < OP_NAMES.length; op++) {
      const t = run(17, op, UDP_FFFF_AFTER, 1500, SEED ^ (0x200 + op));
      expect(t.failures).toEqual([]);
      cases += t.cases;
      ffff += t.ffffSeen;
    }
    total += cases;
    // Every tuned case (short payloads are skipped) must end at exactly 0xffff.
    expect(cases).toBeGreaterThan(5000);
    expect(ffff).toBe(cases);
  });

  it('UDP stored 0xffff (computed 0) rewrites correctly, and survives no-op rewrites', () => {
    let cases = 0;
    for (let op = 0; op < OP_NAMES.length; op++) {
      const t = run(17, op, UDP_FFFF_BEFORE, 1500, SEED ^ (0x300 + op));
      expect(t.failures).toEqual([]);
      cases += t.cases;
    }
    total += cases;
    expect(cases).toBeGreaterThan(5000);
  });

  it('ICMP echo identifier rewrite', () => {
    const rng = mulberry32(SEED ^ 0x400);
    const failures: string[] = [];
    for (let i = 0; i < 10_000; i++) {
      const ipOff = int(rng, 6);
      const len = build(rng, ipOff, 1);
      const before = hex(buf.subarray(ipOff, ipOff + len));
      icmpRewriteEchoId(buf, ipOff, int(rng, 0x10000));
      const want = l4ChecksumFull(buf, ipOff);
      if (stored(ipOff, 1) !== want && failures.length < 5) failures.push(before);
    }
    total += 10_000;
    expect(failures).toEqual([]);
  });

  it('ran at least 100k cases in total', () => {
    expect(total).toBeGreaterThanOrEqual(100_000);
  });
});
