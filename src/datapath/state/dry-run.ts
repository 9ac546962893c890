// A copy of a Datapath to run the real program on without changing the original: what
// `kubetun trace` does to explain a packet "as the data plane would handle it now".
//
// Which state dpProcess writes decides what is copied: conntrack (create, state, counters),
// session affinity, the SNAT table (each of both families), the per-service scheduler state, the
// RNG, counters, the IPv6 scratch and the scalar fields — copied, so the copy's choices are the ones the original would make for the
// same packet next. The service, backend and revNat maps, the timeouts and the NAT config are
// only read per packet: shared. Fragments are not carried over (a trace is a first packet).
// The copy has its own event ring (so a trace can describe its packet like `monitor` does).
// Slow world: allocates a copy of each written map (a few MB for a full conntrack).
import { AffinityMap } from '../../maps/affinity.ts';
import { ConntrackMap } from '../../maps/conntrack.ts';
import { FragMap } from '../../maps/frag.ts';
import { SnatMap } from '../../maps/snat.ts';
import { Datapath, DP_OUT_CAPACITY } from './datapath.ts';
import { EventRing } from './events.ts';
import type { NatState } from './nat-state.ts';

function copyBuf<T extends ArrayBuffer | SharedArrayBuffer>(b: T): ArrayBuffer {
  const c = new ArrayBuffer(b.byteLength);
  new Uint8Array(c).set(new Uint8Array(b));
  return c;
}

export function dpDryRunCopy(dp: Datapath): Datapath {
  const nat = Object.create(Object.getPrototypeOf(dp.nat)) as NatState;
  Object.assign(nat, dp.nat, {
    snat: new SnatMap(dp.nat.snat.capacity, { buffer: copyBuf(dp.nat.snat.buffer) }),
    snat6: new SnatMap(dp.nat.snat6.capacity, { buffer: copyBuf(dp.nat.snat6.buffer), ipv6: true }),
  });
  const c = Object.create(Datapath.prototype) as Datapath;
  Object.assign(c, dp, {
    ct: new ConntrackMap(dp.ct.capacity, { buffer: copyBuf(dp.ct.buffer) }),
    aff: new AffinityMap(dp.aff.capacity, { buffer: copyBuf(dp.aff.buffer) }),
    ct6: new ConntrackMap(dp.ct6.capacity, { buffer: copyBuf(dp.ct6.buffer), ipv6: true }),
    aff6: new AffinityMap(dp.aff6.capacity, { buffer: copyBuf(dp.aff6.buffer), ipv6: true }),
    nat,
    frags: new FragMap(16),
    frags6: new FragMap(16, true),
    a6: new Int32Array(dp.a6.length),
    ct6Gc: { ...dp.ct6Gc },
    sched: dp.sched.copy(),
    rng: dp.rng.copy(),
    counters: dp.counters.slice(),
    out: new Uint8Array(DP_OUT_CAPACITY),
    ctGc: { ...dp.ctGc },
    events: new EventRing({ capacity: 2, snap: 0 }),
  });
  return c;
}
