import { describe, expect, it } from 'vitest';
import { CT_CLASH, CT_EXISTS, CT_FULL, ConntrackMap } from '../../src/maps/conntrack.ts';
import { below, mulberry32 } from './prng.ts';

//   client 10.244.1.5:40000 ──▶ VIP 10.96.0.10:80      (original, looked up with lookupOrig)
//   client 10.244.1.5:40000 ◀── backend 10.244.2.7:8080 (reply, looked up with lookupReply)

const TCP = 6;
const UDP = 17;
const ICMP = 1;
const CLIENT = 0x0af40105;
const VIP = 0x0a60000a;
const BACKEND = 0x0af40207;
const BACKEND2 = 0x0af40308;

interface Flow {
  proto: number;
  saddr: number;
  daddr: number;
  sport: number;
  dport: number;
  baddr: number;
  bport: number;
  backendId: number;
  revNat: number;
  expires: number;
  pktsOrig: number;
  bytesOrig: number;
  pktsReply: number;
  bytesReply: number;
  entry: number;
}

const origKey = (f: {
  proto: number;
  saddr: number;
  daddr: number;
  sport: number;
  dport: number;
}) => `${f.proto}/${f.saddr}/${f.daddr}/${f.sport}/${f.dport}`;
const replyKey = (f: Flow) => `${f.proto}/${f.baddr}/${f.saddr}/${f.bport}/${f.sport}`;

function flowFields(ct: ConntrackMap, i: number) {
  return {
    proto: ct.proto(i),
    // the map hands addresses out as int32; the model (like the slow world) holds u32
    saddr: ct.saddr(i) >>> 0,
    daddr: ct.daddr(i) >>> 0,
    sport: ct.sport(i),
    dport: ct.dport(i),
    baddr: ct.baddr(i) >>> 0,
    bport: ct.bport(i),
    backendId: ct.backendId(i),
    revNat: ct.revNat(i),
    expires: ct.expires(i),
    pktsOrig: ct.pktsOrig(i),
    bytesOrig: ct.bytesOrig(i),
    pktsReply: ct.pktsReply(i),
    bytesReply: ct.bytesReply(i),
    entry: i,
  };
}

describe('ConntrackMap', () => {
  it('finds a flow from both directions and stores every field', () => {
    const ct = new ConntrackMap(16);
    const i = ct.create(TCP, CLIENT, VIP, 40000, 80, BACKEND, 8080, 7, 3, 1060);
    expect(i).toBeGreaterThanOrEqual(0);
    expect(ct.lookupOrig(TCP, CLIENT, VIP, 40000, 80)).toBe(i);
    expect(ct.lookupReply(TCP, BACKEND, CLIENT, 8080, 40000)).toBe(i);
    // neither direction matches the other's tuple, nor a different protocol
    expect(ct.lookupOrig(TCP, BACKEND, CLIENT, 8080, 40000)).toBe(-1);
    expect(ct.lookupReply(TCP, CLIENT, VIP, 40000, 80)).toBe(-1);
    expect(ct.lookupOrig(UDP, CLIENT, VIP, 40000, 80)).toBe(-1);
    expect(ct.lookupReply(TCP, BACKEND, CLIENT, 8080, 40001)).toBe(-1);
    expect(flowFields(ct, i)).toEqual({
      proto: TCP,
      saddr: CLIENT,
      daddr: VIP,
      sport: 40000,
      dport: 80,
      baddr: BACKEND,
      bport: 8080,
      backendId: 7,
      revNat: 3,
      expires: 1060,
      pktsOrig: 0,
      bytesOrig: 0,
      pktsReply: 0,
      bytesReply: 0,
      entry: i,
    });
    ct.setState(i, 4);
    ct.setFlags(i, 0x81);
    ct.setExpires(i, 9000);
    expect([ct.state(i), ct.flags(i), ct.expires(i)]).toEqual([4, 0x81, 9000]);
    expect(ct.size).toBe(1);
  });

  it('addresses >= 2^31: int32 out, found from the u32 and the int32 form alike', () => {
    const ct = new ConntrackMap(16);
    const client = 0xc0a80a05; // 192.168.10.5
    const vip = 0xac1e000b; // 172.30.0.11
    const be = 0xac1f0002; // 172.31.0.2
    const i = ct.create(TCP, client, vip, 40000, 80, be | 0, 8080, 7, 3, 1060);
    expect(i).toBeGreaterThanOrEqual(0);
    expect([ct.saddr(i), ct.daddr(i), ct.baddr(i)]).toEqual([client | 0, vip | 0, be | 0]);
    expect(ct.lookupOrig(TCP, client, vip, 40000, 80)).toBe(i);
    expect(ct.lookupOrig(TCP, client | 0, vip | 0, 40000, 80)).toBe(i);
    expect(ct.lookupReply(TCP, be, client, 8080, 40000)).toBe(i);
    expect(ct.lookupReply(TCP, be | 0, client | 0, 8080, 40000)).toBe(i);
    expect(ct.hashTuple(TCP, client, vip, 40000, 80)).toBe(
      ct.hashTuple(TCP, client | 0, vip | 0, 40000, 80),
    );
    // the same flow in the other form is the same flow
    expect(ct.create(TCP, client | 0, vip | 0, 40000, 80, be, 8080, 7, 3, 1060)).toBe(CT_EXISTS);
    expect(ct.rebind(i, be, 8080, 7)).toBe(true);
    expect(ct.lookupReply(TCP, be | 0, client, 8080, 40000)).toBe(i);
  });

  it('keys ICMP echo flows by the echo id in both port positions', () => {
    const ct = new ConntrackMap(4);
    const i = ct.create(ICMP, CLIENT, VIP, 0x1234, 0x1234, BACKEND, 0x1234, 1, 1, 10);
    expect(ct.lookupOrig(ICMP, CLIENT, VIP, 0x1234, 0x1234)).toBe(i);
    expect(ct.lookupReply(ICMP, BACKEND, CLIENT, 0x1234, 0x1234)).toBe(i);
    expect(ct.lookupOrig(ICMP, CLIENT, VIP, 0x1235, 0x1235)).toBe(-1);
  });

  it('counts packets and bytes per direction, wrapping modulo 2^32', () => {
    const ct = new ConntrackMap(4);
    const i = ct.create(UDP, CLIENT, VIP, 5353, 53, BACKEND, 53, 1, 1, 10);
    ct.addOrig(i, 60);
    ct.addOrig(i, 1500);
    ct.addReply(i, 100);
    expect([ct.pktsOrig(i), ct.bytesOrig(i), ct.pktsReply(i), ct.bytesReply(i)]).toEqual([
      2, 1560, 1, 100,
    ]);
    ct.addReply(i, 0xffffffff);
    expect(ct.bytesReply(i)).toBe(99);
  });

  it('refuses a duplicate original tuple and a reply tuple owned by another flow', () => {
    const ct = new ConntrackMap(8);
    ct.create(TCP, CLIENT, VIP, 40000, 80, BACKEND, 8080, 7, 3, 10);
    expect(ct.create(TCP, CLIENT, VIP, 40000, 80, BACKEND2, 8080, 8, 3, 10)).toBe(CT_EXISTS);
    // same client port to a second VIP whose backend is the same pod and port
    expect(ct.create(TCP, CLIENT, VIP + 1, 40000, 80, BACKEND, 8080, 7, 4, 10)).toBe(CT_CLASH);
    expect(ct.size).toBe(1);
  });

  it('rebinds a flow to a new backend: the old reply tuple stops matching, the new one matches', () => {
    const ct = new ConntrackMap(8);
    const i = ct.create(TCP, CLIENT, VIP, 40000, 80, BACKEND, 8080, 7, 3, 10);
    const other = ct.create(TCP, CLIENT, VIP, 40001, 80, BACKEND2, 9090, 8, 3, 10);
    expect(ct.rebind(i, BACKEND2, 9090, 8)).toBe(true);
    expect(ct.lookupReply(TCP, BACKEND, CLIENT, 8080, 40000)).toBe(-1);
    expect(ct.lookupReply(TCP, BACKEND2, CLIENT, 9090, 40000)).toBe(i);
    expect(ct.lookupOrig(TCP, CLIENT, VIP, 40000, 80)).toBe(i);
    expect([ct.baddr(i), ct.bport(i), ct.backendId(i)]).toEqual([BACKEND2, 9090, 8]);
    expect(ct.lookupReply(TCP, BACKEND2, CLIENT, 9090, 40001)).toBe(other);
    expect(ct.rebind(other, BACKEND2, 9090, 9)).toBe(true); // same tuple: only the id changes
    expect(ct.backendId(other)).toBe(9);
    expect(ct.lookupReply(TCP, BACKEND2, CLIENT, 9090, 40001)).toBe(other);
    const third = ct.create(TCP, CLIENT, VIP, 40002, 80, BACKEND, 8080, 7, 3, 10);
    ct.delete(third);
    expect(ct.rebind(third, BACKEND, 1, 1)).toBe(false);
  });

  it('refuses a rebind whose reply tuple belongs to another flow', () => {
    const ct = new ConntrackMap(8);
    const a = ct.create(UDP, CLIENT, VIP, 1000, 53, BACKEND, 53, 1, 1, 10);
    ct.create(UDP, CLIENT, VIP + 1, 1000, 53, BACKEND2, 53, 2, 2, 10);
    expect(ct.rebind(a, BACKEND2, 53, 2)).toBe(false);
    expect(ct.lookupReply(UDP, BACKEND, CLIENT, 53, 1000)).toBe(a);
    expect(ct.backendId(a)).toBe(1);
  });

  it('fails create with CT_FULL at capacity without evicting anything, and recovers after a delete', () => {
    const ct = new ConntrackMap(64);
    const ids: number[] = [];
    for (let p = 0; p < 64; p++)
      ids.push(ct.create(TCP, CLIENT, VIP, 1000 + p, 80, BACKEND, 8080, 1, 1, 5));
    expect(new Set(ids).size).toBe(64);
    expect(ct.create(TCP, CLIENT, VIP, 2000, 80, BACKEND, 8080, 1, 1, 5)).toBe(CT_FULL);
    expect(ct.size).toBe(64);
    for (let p = 0; p < 64; p++) {
      expect(ct.lookupOrig(TCP, CLIENT, VIP, 1000 + p, 80)).toBe(ids[p]);
      expect(ct.lookupReply(TCP, BACKEND, CLIENT, 8080, 1000 + p)).toBe(ids[p]);
    }
    expect(ct.lookupOrig(TCP, CLIENT, VIP, 2000, 80)).toBe(-1);
    ct.delete(ids[10]);
    expect(ct.create(TCP, CLIENT, VIP, 2000, 80, BACKEND, 8080, 1, 1, 5)).toBe(ids[10]);
  });

  it('scan deletes exactly the entries with expires <= now, reporting each before it goes', () => {
    const ct = new ConntrackMap(256);
    for (let p = 0; p < 200; p++) ct.create(UDP, CLIENT, VIP, p, 53, BACKEND, 53, 1, 1, 100 + p);
    const reported: number[] = [];
    let cursor = 0;
    let steps = 0;
    do {
      cursor = ct.scan(cursor, 37, 149, (i) => reported.push(ct.sport(i)));
      steps++;
    } while (cursor !== 0);
    expect(steps).toBe(Math.ceil(200 / 37));
    expect(reported.sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, p) => p));
    expect(ct.size).toBe(150);
    expect(ct.lookupOrig(UDP, CLIENT, VIP, 49, 53)).toBe(-1);
    expect(ct.lookupReply(UDP, BACKEND, CLIENT, 53, 49)).toBe(-1);
    expect(ct.lookupOrig(UDP, CLIENT, VIP, 50, 53)).toBeGreaterThanOrEqual(0);
    expect(ct.lookupReply(UDP, BACKEND, CLIENT, 53, 199)).toBeGreaterThanOrEqual(0);
    // a scan without a callback deletes too
    expect(ct.scan(0, 1000, 1000)).toBe(0);
    expect(ct.size).toBe(0);
  });

  it('lists live entries with next()', () => {
    const ct = new ConntrackMap(128);
    for (let p = 0; p < 100; p++) ct.create(TCP, CLIENT, VIP, p, 80, BACKEND, 80, 1, 1, 1);
    for (let p = 0; p < 100; p += 3) ct.delete(ct.lookupOrig(TCP, CLIENT, VIP, p, 80));
    const ports: number[] = [];
    for (let i = ct.next(0); i >= 0; i = ct.next(i + 1)) ports.push(ct.sport(i));
    expect(ports.sort((a, b) => a - b)).toEqual(
      Array.from({ length: 100 }, (_, p) => p).filter((p) => p % 3),
    );
  });

  it('keeps the reply direction findable when its chain wraps past slot 0 and is cut in the middle', () => {
    const ct = new ConntrackMap(16, { seed: 11 });
    const last = ct.replyIndex.mask;
    const ports: number[] = [];
    for (let p = 1; ports.length < 4; p++) {
      if ((ct.hashTuple(TCP, BACKEND, CLIENT, 8080, p) & last) === last) ports.push(p);
    }
    for (const p of ports) ct.create(TCP, CLIENT, VIP, p, 80, BACKEND, 8080, p, 1, 1);
    const at = ports.map((p) => ct.replyIndex.slotOf(ct.lookupOrig(TCP, CLIENT, VIP, p, 80)));
    expect(at).toEqual([last, 0, 1, 2]);
    ct.delete(ct.lookupOrig(TCP, CLIENT, VIP, ports[1], 80));
    for (const p of [ports[0], ports[2], ports[3]]) {
      expect(ct.backendId(ct.lookupReply(TCP, BACKEND, CLIENT, 8080, p))).toBe(p);
      expect(ct.backendId(ct.lookupOrig(TCP, CLIENT, VIP, p, 80))).toBe(p);
    }
  });

  it('matches a reference model over 40000 random creates, rebinds, deletes, counts and scans', () => {
    const rnd = mulberry32(2024);
    const ct = new ConntrackMap(32, { seed: 5 });
    const byOrig = new Map<string, Flow>();
    const byReply = new Map<string, Flow>();
    const clients = [CLIENT, CLIENT + 1, CLIENT + 2, 0xfffffff0];
    const backends = [BACKEND, BACKEND2, 0x80000001];
    const pick = <T>(xs: T[]) => xs[below(rnd, xs.length)];
    let now = 0;
    const check = (f: Flow): string | null => {
      const o = ct.lookupOrig(f.proto, f.saddr, f.daddr, f.sport, f.dport);
      const r = ct.lookupReply(f.proto, f.baddr, f.saddr, f.bport, f.sport);
      if (o !== f.entry || r !== f.entry)
        return `${origKey(f)}: orig ${o} reply ${r} want ${f.entry}`;
      const got = JSON.stringify(flowFields(ct, o));
      return got === JSON.stringify(f) ? null : `${origKey(f)}: ${got} want ${JSON.stringify(f)}`;
    };
    for (let op = 0; op < 40000; op++) {
      const t = {
        proto: pick([TCP, UDP]),
        saddr: pick(clients),
        daddr: pick([VIP, VIP + 1]),
        sport: 30000 + below(rnd, 8),
        dport: 80,
      };
      const existing = byOrig.get(origKey(t));
      const what = below(rnd, 100);
      let err: string | null = null;
      if (what < 45) {
        const f: Flow = {
          ...t,
          baddr: pick(backends),
          bport: pick([8080, 9090]),
          backendId: below(rnd, 1000) + 1,
          revNat: below(rnd, 65535) + 1,
          expires: now + below(rnd, 300),
          pktsOrig: 0,
          bytesOrig: 0,
          pktsReply: 0,
          bytesReply: 0,
          entry: -1,
        };
        const want = existing
          ? CT_EXISTS
          : byReply.has(replyKey(f))
            ? CT_CLASH
            : byOrig.size >= ct.capacity
              ? CT_FULL
              : 0;
        const got = ct.create(
          f.proto,
          f.saddr,
          f.daddr,
          f.sport,
          f.dport,
          f.baddr,
          f.bport,
          f.backendId,
          f.revNat,
          f.expires,
        );
        if (want < 0 ? got !== want : got < 0) err = `create ${origKey(f)}: ${got} want ${want}`;
        if (got >= 0) {
          f.entry = got;
          byOrig.set(origKey(f), f);
          byReply.set(replyKey(f), f);
        }
      } else if (what < 55 && existing) {
        const nb = pick(backends);
        const np = pick([8080, 9090]);
        const id = below(rnd, 1000) + 1;
        const nk = `${existing.proto}/${nb}/${existing.saddr}/${np}/${existing.sport}`;
        const owner = byReply.get(nk);
        const ok = ct.rebind(existing.entry, nb, np, id);
        if (ok !== (owner === undefined || owner === existing)) err = `rebind ${nk}: ${ok}`;
        if (ok) {
          byReply.delete(replyKey(existing));
          Object.assign(existing, { baddr: nb, bport: np, backendId: id });
          byReply.set(replyKey(existing), existing);
        }
      } else if (what < 70 && existing) {
        ct.delete(existing.entry);
        byOrig.delete(origKey(existing));
        byReply.delete(replyKey(existing));
      } else if (what < 90 && existing) {
        const bytes = below(rnd, 1500);
        if (below(rnd, 2)) {
          ct.addOrig(existing.entry, bytes);
          existing.pktsOrig++;
          existing.bytesOrig += bytes;
        } else {
          ct.addReply(existing.entry, bytes);
          existing.pktsReply++;
          existing.bytesReply += bytes;
        }
      } else if (what < 92) {
        now += below(rnd, 10);
        const expired = new Set<number>();
        let c = 0;
        do c = ct.scan(c, 1 + below(rnd, 40), now, (i) => expired.add(i));
        while (c !== 0);
        const want = new Set(
          [...byOrig.values()].filter((f) => f.expires <= now).map((f) => f.entry),
        );
        if ([...want].sort().join() !== [...expired].sort().join()) err = `scan at ${now}`;
        for (const f of [...byOrig.values()]) {
          if (f.expires > now) continue;
          byOrig.delete(origKey(f));
          byReply.delete(replyKey(f));
        }
      }
      if (!err && existing && byOrig.has(origKey(existing))) err = check(existing);
      if (!err && ct.size !== byOrig.size) err = `size ${ct.size} want ${byOrig.size}`;
      if (!err && op % 101 === 0) {
        for (const f of byOrig.values()) {
          err = check(f);
          if (err) break;
        }
      }
      if (!err && existing && !byOrig.has(origKey(existing))) {
        if (ct.lookupOrig(t.proto, t.saddr, t.daddr, t.sport, t.dport) !== -1)
          err = `stale ${origKey(t)}`;
      }
      if (err) expect.fail(`op ${op}: ${err}`);
    }
  });

  it('costs at most 64 bytes per flow at capacity, index slack included', () => {
    for (const cap of [1024, 1 << 16, 1 << 20]) {
      const ct = new ConntrackMap(cap);
      expect(ct.capacity).toBe(cap);
      expect(ct.bytesPerFlow()).toBeLessThanOrEqual(64);
      expect(ct.origIndex.slots.length).toBe(2 * cap);
    }
  });

  it('attaches a second view to a SharedArrayBuffer and sees the same flows', () => {
    const a = new ConntrackMap(32, { shared: true });
    const i = a.create(TCP, CLIENT, VIP, 1, 80, BACKEND, 8080, 1, 1, 10);
    const b = new ConntrackMap(32, { buffer: a.buffer });
    expect(b.lookupReply(TCP, BACKEND, CLIENT, 8080, 1)).toBe(i);
    b.delete(i);
    expect(a.lookupOrig(TCP, CLIENT, VIP, 1, 80)).toBe(-1);
    expect(a.size).toBe(0);
  });

  it('shrugs off invalid entry indices and garbage tuples on the fast path', () => {
    const ct = new ConntrackMap(8);
    const i = ct.create(TCP, CLIENT, VIP, 1, 80, BACKEND, 8080, 1, 1, 10);
    for (const bad of [-1, 8, 1e9, Number.NaN, i + 0.5]) {
      expect(() => ct.delete(bad)).not.toThrow();
      expect(ct.rebind(bad, BACKEND2, 1, 1)).toBe(false);
      expect(ct.isLive(bad)).toBe(false);
    }
    expect(ct.lookupOrig(Number.NaN, -1, 2 ** 40, -5, 1e6)).toBe(-1);
    expect(ct.lookupReply(TCP, Number.NaN, CLIENT, 8080, 1)).toBe(-1);
    expect(ct.lookupOrig(TCP, CLIENT, VIP, 1, 80)).toBe(i);
    expect(ct.size).toBe(1);
  });

  it('masks out-of-range tuple fields consistently, so delete leaves no stranded index slot', () => {
    const ct = new ConntrackMap(8);
    const i = ct.create(TCP + 256, CLIENT, VIP, 70000, 80, BACKEND, 65536 + 8080, 1, 1, 10);
    expect([ct.proto(i), ct.sport(i), ct.bport(i)]).toEqual([TCP, 70000 & 0xffff, 8080]);
    expect(ct.lookupOrig(TCP, CLIENT, VIP, 70000 & 0xffff, 80)).toBe(i);
    expect(ct.lookupReply(TCP, BACKEND, CLIENT, 8080, 70000 & 0xffff)).toBe(i);
    expect(ct.rebind(i, BACKEND2, 65536 + 9090, 2)).toBe(true);
    expect(ct.lookupReply(TCP, BACKEND2, CLIENT, 9090, 70000 & 0xffff)).toBe(i);
    ct.delete(i);
    expect(ct.origIndex.slots.every((v) => v === 0)).toBe(true);
    expect(ct.replyIndex.slots.every((v) => v === 0)).toBe(true);
  });

  it('clear() forgets every flow in both directions', () => {
    const ct = new ConntrackMap(8);
    for (let p = 0; p < 8; p++) ct.create(TCP, CLIENT, VIP, p, 80, BACKEND, 8080, 1, 1, 1);
    ct.clear();
    expect(ct.size).toBe(0);
    expect(ct.lookupReply(TCP, BACKEND, CLIENT, 8080, 3)).toBe(-1);
    expect(ct.create(TCP, CLIENT, VIP, 3, 80, BACKEND, 8080, 1, 1, 1)).toBeGreaterThanOrEqual(0);
  });
});
