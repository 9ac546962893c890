// datapathSync: a partial sync writes only the service ports the tracker reports, a full one
// every port the maps do not hold as it is now; both leave the maps as a fresh full load of the
// same state would.
import { loaderOf } from '../datapath/harness.ts';
import { describe, expect, it } from 'vitest';
import { datapathSync } from '../../src/control/datapath-sync.ts';
import { ChangeTracker } from '../../src/control/tracker.ts';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { SCHED_RR } from '../../src/sched/kinds.ts';
import { ipv4ToU32 } from '../../src/wire/addr.ts';
import { whileTurning } from '../fixtures/turns.ts';
import { ep, port, slice, svc } from './fixtures.ts';

function vip(k: number): string {
  return `10.96.${k >> 8}.${(k & 255) + 1}`;
}

function cluster(t: ChangeTracker, n: number): void {
  for (let k = 0; k < n; k++) {
    t.services.update(
      null,
      svc(`s${k}`, { clusterIPs: [vip(k)], ports: [port('dns', 'UDP', 53)] }),
    );
    t.endpointSlices.update(null, slice(`s${k}-a`, `s${k}`, [ep(`10.244.1.${(k % 200) + 1}`)]));
  }
}

function snapshot(dp: Datapath): string[] {
  const out: string[] = [];
  for (let i = dp.svc.next(0); i >= 0; i = dp.svc.next(i + 1)) {
    const slot = dp.svc.slotOf(i);
    const v =
      slot === 0
        ? `${dp.svc.count(i)}/${dp.svc.revNat(i)}/${dp.svc.scheduler(i)}`
        : dp.svc.backendId(i);
    out.push(`${dp.svc.vipOf(i)}:${dp.svc.portOf(i)}/${dp.svc.protoOf(i)}#${slot}=${v}`);
  }
  return out.sort();
}

describe('datapathSync', () => {
  it('a partial sync writes the one changed service port; the maps equal a full load', async () => {
    const t = new ChangeTracker({ now: () => 1000 });
    const dp = createDatapath();
    const sync = datapathSync(dp);
    cluster(t, 100);
    await sync.program({ full: true, changes: t.checkout(), tracker: t }); // 100 ports: sliced
    expect(sync.last).toMatchObject({ full: true, written: 100 });
    const prev = slice('s42-a', 's42', [ep('10.244.1.43')]);
    t.endpointSlices.update(prev, slice('s42-a', 's42', [ep('10.244.1.43'), ep('10.244.9.9')]));
    const prevSvc = svc('s7', { clusterIPs: [vip(7)], ports: [port('dns', 'UDP', 53)] });
    t.services.update(prevSvc, { ...prevSvc, annotations: { 'kubetun.io/scheduler': 'rr' } });
    t.services.update(svc('s9', { clusterIPs: [vip(9)], ports: [port('dns', 'UDP', 53)] }), null);
    const ch = t.checkout();
    sync.program({ full: false, changes: ch, tracker: t });
    expect(sync.last).toEqual({ full: false, written: 2, deleted: 1, refused: [] });
    const m = dp.svc.lookup(ipv4ToU32(vip(42)), 53, 17, 0);
    expect(dp.svc.count(m)).toBe(2);
    const m7 = dp.svc.lookup(ipv4ToU32(vip(7)), 53, 17, 0);
    expect(dp.svc.scheduler(m7)).toBe(SCHED_RR);
    expect(dp.svc.lookup(ipv4ToU32(vip(9)), 53, 17, 0)).toBe(-1);
    const fresh = createDatapath();
    loaderOf(fresh).load(t.resolveAll());
    expect(snapshot(dp)).toEqual(snapshot(fresh));
  });

  it('a sync with nothing changed writes nothing', () => {
    const t = new ChangeTracker({ now: () => 1000 });
    const dp = createDatapath();
    const sync = datapathSync(dp);
    cluster(t, 3);
    sync.program({ full: true, changes: t.checkout(), tracker: t });
    sync.program({ full: false, changes: t.checkout(), tracker: t });
    expect(sync.last).toEqual({ full: false, written: 0, deleted: 0, refused: [] });
  });

  it('a sync of many service ports writes them in slices, the event loop turning between (issue 18)', async () => {
    const t = new ChangeTracker({ now: () => 1000 });
    const dp = createDatapath();
    const sync = datapathSync(dp, {}, undefined, 64);
    cluster(t, 250);
    // A stand-in for the packet loop: what it would see of the maps at each turn.
    const seen: number[] = [];
    let r: ReturnType<typeof sync.program>;
    const { value } = await whileTurning(
      () => {
        r = sync.program({ full: true, changes: t.checkout(), tracker: t });
        return r;
      },
      () => seen.push(dp.svc.size),
    );
    expect(r).toBeInstanceOf(Promise);
    expect(value).toBe(true);
    // 250 ports in slices of 64: the loop ran between them and saw the maps fill part by part
    const between = new Set(seen.filter((n) => n > 0 && n < dp.svc.size));
    expect(between.size).toBeGreaterThanOrEqual(3);
    expect(sync.last).toMatchObject({ full: true, written: 250, deleted: 0 });
    const fresh = createDatapath();
    loaderOf(fresh).load(t.resolveAll());
    expect(snapshot(dp)).toEqual(snapshot(fresh));
    // A full sync after 200 Services went away deletes their ports in slices too.
    for (let k = 50; k < 250; k++)
      t.services.update(
        svc(`s${k}`, { clusterIPs: [vip(k)], ports: [port('dns', 'UDP', 53)] }),
        null,
      );
    t.checkout();
    expect(await sync.program({ full: true, changes: t.checkout(), tracker: t })).toBe(true);
    // (the 50 kept are held as they are: none is written again)
    expect(sync.last).toMatchObject({ full: true, written: 0, deleted: 200 });
    const fresh2 = createDatapath();
    loaderOf(fresh2).load(t.resolveAll());
    expect(snapshot(dp)).toEqual(snapshot(fresh2));
  });

  // Issue 18: a sliced sync used to stop at the slice the loader refused, leaving the slices
  // before it written and those after it not, and every full retry stopped at the same place.
  it('a port refused mid-sync keeps its last good version, every other port is written, the sync fails naming it; fixed, the retry converges to a fresh full load', async () => {
    const t = new ChangeTracker({ now: () => 1000 });
    const dp = createDatapath();
    const sync = datapathSync(dp, {}, undefined, 64);
    cluster(t, 250);
    expect(await sync.program({ full: true, changes: t.checkout(), tracker: t })).toBe(true);
    const before = new Map(t.resolveAll().map((p) => [p.servicePortName, p]));
    // every Service gets a second endpoint; s120 (in the third of four slices) also a scheduler
    // the loader refuses
    const dns = { clusterIPs: [] as string[], ports: [port('dns', 'UDP', 53)] };
    for (let k = 0; k < 250; k++) {
      const old = slice(`s${k}-a`, `s${k}`, [ep(`10.244.1.${(k % 200) + 1}`)]);
      t.endpointSlices.update(
        old,
        slice(`s${k}-a`, `s${k}`, [
          ep(`10.244.1.${(k % 200) + 1}`),
          ep(`10.244.2.${(k % 200) + 1}`),
        ]),
      );
    }
    const s120 = svc('s120', { ...dns, clusterIPs: [vip(120)] });
    const bad = { ...s120, annotations: { 'kubetun.io/scheduler': 'fastest' } };
    t.services.update(s120, bad);
    const failed = await Promise.resolve(
      sync.program({ full: true, changes: t.checkout(), tracker: t }),
    ).catch((e: Error) => e);
    const now = t.resolveAll();
    const expected = createDatapath();
    loaderOf(expected).load(
      now.map((p) =>
        p.servicePortName === 'default/s120:dns' ? before.get(p.servicePortName)! : p,
      ),
    );
    expect(snapshot(dp)).toEqual(snapshot(expected));
    expect(failed).toBeInstanceOf(Error);
    expect((failed as Error).message).toMatch(
      /1 service port\(s\) refused.*default\/s120:dns.*fastest/,
    );
    expect(sync.last.refused).toHaveLength(1);
    // the runner's retry, still bad: the same state (nothing half-written, nothing lost)
    // (only s120 is written again: one write, synchronous, and it throws)
    expect(() => sync.program({ full: true, changes: t.checkout(), tracker: t })).toThrow(
      /default\/s120:dns/,
    );
    expect(sync.last).toMatchObject({ full: true, written: 1 });
    expect(snapshot(dp)).toEqual(snapshot(expected));
    // fixed: the retry succeeds and the maps are exactly a fresh full load
    t.services.update(bad, { ...s120, annotations: { 'kubetun.io/scheduler': 'rr' } });
    expect(await sync.program({ full: true, changes: t.checkout(), tracker: t })).toBe(true);
    const fresh = createDatapath();
    loaderOf(fresh).load(t.resolveAll());
    expect(snapshot(dp)).toEqual(snapshot(fresh));
    expect(dp.svc.scheduler(dp.svc.lookup(ipv4ToU32(vip(120)), 53, 17, 0))).toBe(SCHED_RR);
  });

  it('a small (one-write) sync with a refused port writes the others too', () => {
    const t = new ChangeTracker({ now: () => 1000 });
    const dp = createDatapath();
    const sync = datapathSync(dp);
    cluster(t, 3);
    sync.program({ full: true, changes: t.checkout(), tracker: t });
    const s1 = svc('s1', { clusterIPs: [vip(1)], ports: [port('dns', 'UDP', 53)] });
    t.services.update(s1, { ...s1, annotations: { 'kubetun.io/scheduler': 'fastest' } });
    t.services.update(null, svc('s9', { clusterIPs: [vip(9)], ports: [port('dns', 'UDP', 53)] }));
    let err: unknown;
    try {
      sync.program({ full: false, changes: t.checkout(), tracker: t });
    } catch (e) {
      err = e;
    }
    expect(dp.svc.lookup(ipv4ToU32(vip(9)), 53, 17, 0)).toBeGreaterThanOrEqual(0);
    expect(dp.svc.scheduler(dp.svc.lookup(ipv4ToU32(vip(1)), 53, 17, 0))).toBe(0); // random, as before
    expect(String(err)).toMatch(/default\/s1:dns/);
  });
});
