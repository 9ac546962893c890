// "Never throws", for the offload half of the packet loop: the mixed-traffic stream behind
// virtio_net_hdrs that are seeded-random — sometimes valid (plain, partial checksum, GSO), often
// damaged field by field (gso_type, gso_size, hdr_len, csum_start, csum_offset, flags), the read
// sometimes cut shorter than the header. Every read must end in exactly one counter (a loop
// AGENT_DROP_VNET_* or one datapath reason), and every packet written back must carry a header
// vnetCheck accepts — the checks the kernel makes on a write — or, for a generated one, zeros.
import { describe, expect, it } from 'vitest';
import { V_DROP, V_TX } from '../../src/datapath/state/verdict.ts';
import {
  AGENT_DROP_VNET_BAD_CSUM,
  AGENT_DROP_VNET_TRUNCATED,
  createPacketLoop,
} from '../../src/node/loop.ts';
import type { TunDevice } from '../../src/tun/tun.ts';
import { parseCidr } from '../../src/wire/addr.ts';
import { VNET_HDR_LEN, VNET_OK, vnetCheck, vnetWrite } from '../../src/wire/virtio.ts';
import {
  clockMs,
  HIGH_ADDRS,
  lcg,
  MixedTraffic,
  mixedDatapath,
  OFF,
} from '../datapath/mixed-traffic.ts';

const VOFF = 7;

/** A header for the packet at vbuf[VOFF + 10 ..], valid or damaged by `rnd`. */
function header(vbuf: Uint8Array, rnd: (n: number) => number): void {
  const ip = VOFF + VNET_HDR_LEN;
  const ihl = (vbuf[ip] & 15) << 2;
  const proto = vbuf[ip + 9];
  const at = proto === 6 ? 16 : 6;
  const kind = rnd(4);
  let flags = 0;
  let type = 0;
  let size = 0;
  let start = 0;
  let off = 0;
  if (kind >= 1) [flags, start, off] = [1, ihl, at];
  if (kind === 2) [type, size] = [proto === 6 ? 1 : 5, 8 + rnd(64)];
  if (kind === 3) {
    // one field damaged at random
    const f = rnd(6);
    const junk = rnd(2) === 0 ? rnd(256) : rnd(65536);
    if (f === 0) flags = junk & 0xff;
    else if (f === 1) type = junk & 0xff;
    else if (f === 2) size = junk;
    else if (f === 3) start = junk;
    else if (f === 4) off = junk;
    else type = 1 + rnd(5);
  }
  vnetWrite(vbuf, VOFF, flags, type, rnd(8) === 0 ? rnd(65536) : 0, size, start, off);
}

function runFuzz(seed: number, n: number): void {
  const dp = mixedDatapath(seed, 2048, HIGH_ADDRS);
  const t = new MixedTraffic(HIGH_ADDRS);
  const rnd = lcg(seed);
  const vbuf = new Uint8Array(4096);
  const offs = Uint32Array.of(VOFF);
  const lens = new Uint32Array(1);
  const bad: string[] = [];
  let written = 0;
  const fake = {
    writeBatch(b: Uint8Array, o: Uint32Array, l: Uint32Array, m: number): number {
      written += m;
      for (let i = 0; i < m; i++) {
        const rc = vnetCheck(b, o[i], o[i] + l[i]);
        if (rc !== VNET_OK) bad.push(`written with vnetCheck ${rc}`);
      }
      return m;
    },
    write(b: Uint8Array, o: number): boolean {
      for (let i = 0; i < VNET_HDR_LEN; i++) if (b[o + i] !== 0) bad.push('reply header not zero');
      return true;
    },
  } as unknown as TunDevice;
  let now = 0;
  const loop = createPacketLoop(dp, fake, parseCidr('10.96.0.0/12'), 1, () => now, { vnet: true });
  const sum = (a: Float64Array) => a.reduce((x, y) => x + y, 0);
  const vnetDrops = () =>
    sum(loop.counters.subarray(AGENT_DROP_VNET_TRUNCATED, AGENT_DROP_VNET_BAD_CSUM + 1));
  for (let k = 0; k < n; k++) {
    const len = t.next(k);
    vbuf.set(t.buf.subarray(OFF, OFF + len), VOFF + VNET_HDR_LEN);
    header(vbuf, rnd);
    lens[0] = rnd(16) === 0 ? rnd(VNET_HDR_LEN + 1) : VNET_HDR_LEN + len;
    now = clockMs(k);
    const before = sum(dp.counters) + vnetDrops();
    const w = written;
    loop.handle(vbuf, offs, lens, 1);
    expect(sum(dp.counters) + vnetDrops()).toBe(before + 1);
    // the stream learns a conversation's translated tuple from its first packet, in t.buf
    t.buf.set(vbuf.subarray(VOFF + VNET_HDR_LEN, VOFF + VNET_HDR_LEN + 24), OFF);
    t.after(written > w ? V_TX : V_DROP);
  }
  expect(bad).toEqual([]);
  // the damage reached both sides: headers dropped by the loop, packets judged by the program
  expect(vnetDrops()).toBeGreaterThan(n / 20);
  expect(sum(dp.counters)).toBeGreaterThan(n / 2);
}

describe('fuzz: virtio headers in front of mixed traffic', () => {
  it('never throws, one counter per read, only acceptable headers written (seed 11, 50k)', () => {
    runFuzz(11, 50_000);
  });

  it('the same with seed 12', () => {
    runFuzz(12, 50_000);
  });
});
