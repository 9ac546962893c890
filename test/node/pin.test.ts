// Pinned maps (src/node/pin.ts): a datapath on a file mapping, attached again by a second
// mapping of the same file as a restarted agent would; a layout it does not fit is refused.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SVC_F_WILDCARD } from '../../src/maps/services.ts';
import { UserError } from '../../src/errors.ts';
import {
  attachPinned,
  createPinned,
  PIN_VERSION,
  pinPathFor,
  pinProblem,
} from '../../src/node/pin.ts';
import { ACK, loaderOf, run, SYN } from '../datapath/harness.ts';
import { buildTcp6, l4Of, servicePort6 } from '../datapath/harness6.ts';

const dir = mkdtempSync(join(tmpdir(), 'kt-pin-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const small = {
  ctCapacity: 1024,
  svcCapacity: 256,
  beCapacity: 256,
  affinityCapacity: 64,
  snatCapacity: 256,
};

describe('pinned maps', () => {
  it('lives beside the control socket', () => {
    expect(pinPathFor('/run/kubetun/node1.sock')).toBe('/run/kubetun/node1.maps');
  });

  it('a second mapping of the file sees the flows and services the first wrote', () => {
    const path = join(dir, 'a.maps');
    const a = createPinned(path, small);
    expect(a.attached).toBe(false);
    const e = a.dp.ct.create(6, 0x0af40110, 0x0a60000a, 40000, 80, 0x0af4010b, 8080, 7, 3, 999);
    expect(e).toBeGreaterThanOrEqual(0);
    a.dp.ct.addOrig(e, 1500);
    expect(a.dp.svc.upsertMaster(0x0a60000a, 0, 0, 0, 0, SVC_F_WILDCARD, 0, 0)).toBe(true);
    expect(a.dp.be.upsert(7, 0x0af4010b, 8080, 6, 0, 0)).toBe(true);

    const b = attachPinned(path, small);
    expect(b.attached).toBe(true);
    const i = b.dp.ct.lookupOrig(6, 0x0af40110, 0x0a60000a, 40000, 80);
    expect(i).toBe(e);
    expect(b.dp.ct.lookupReply(6, 0x0af4010b, 0x0af40110, 8080, 40000)).toBe(e);
    expect([b.dp.ct.backendId(i), b.dp.ct.revNat(i), b.dp.ct.bytesOrig(i)]).toEqual([7, 3, 1500]);
    expect(b.dp.ct.seed).toBe(a.dp.ct.seed);
    expect(b.dp.svc.lookup(0x0a60000a, 0, 0, 0)).toBeGreaterThanOrEqual(0);
    expect(b.dp.be.lookup(7)).toBeGreaterThanOrEqual(0);
    // one memory: a write through the second mapping is seen by the first
    b.dp.ct.addReply(i, 60);
    expect(a.dp.ct.bytesReply(e)).toBe(60);
  });

  it('refuses, in one line, maps laid out for other flags (an upgrade across a layout change)', () => {
    const path = join(dir, 'b.maps');
    createPinned(path, small);
    expect(pinProblem(path, small)).toBeUndefined();
    const other = { ...small, ctCapacity: 4096 };
    expect(pinProblem(path, other)).toMatch(
      /ConntrackMap: attached buffer is \d+ bytes, layout needs \d+ \(another layout, or other flags\)/,
    );
    let err: unknown;
    try {
      attachPinned(path, other);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(UserError);
    expect((err as Error).message.split('\n')).toHaveLength(1);
  });

  it('refuses a file of another layout version and a file that is not pinned maps', () => {
    const path = join(dir, 'c.maps');
    createPinned(path, small);
    const h = new Uint32Array(1024);
    h.set([0x4b54504e, 99, 6, 1]);
    writeFileSync(path, new Uint8Array(h.buffer), { flag: 'r+' });
    expect(pinProblem(path, small)).toMatch(`layout v99, this kubetun reads v${PIN_VERSION}`);
    writeFileSync(join(dir, 'd.maps'), 'hello');
    expect(pinProblem(join(dir, 'd.maps'), small)).toMatch(/not a kubetun pinned-map file/);
  });

  it('pins the IPv6 maps too: a second mapping translates the replies of IPv6 flows the first began', () => {
    const path = join(dir, 'v6.maps');
    const NODE = 'fd00:172:30::11';
    const VIP = 'fd00:10:96::a';
    const BE = 'fd00:10:244:2::5';
    const C = 'fd00:10:244:1::10';
    const OUT = '2001:db8:7::100';
    const cfg = {
      ...small,
      seed: 5,
      nodeIp6: NODE,
      podGateway6: 'fd00:10:244:1::1',
      podCidr6: 'fd00:10:244:1::/64',
      clusterCidr6: 'fd00:10:244::/56',
    };
    const T0 = 1_000_000;
    const a = createPinned(path, cfg);
    const web = servicePort6('web', VIP, 80, 'TCP', [`[${BE}]:8080`], { type: 'NodePort' });
    web.port.nodePort = 30080;
    loaderOf(a.dp).load([web], { nodeName: 'node1' });
    const syn = { src: C, dst: VIP, sport: 41000, dport: 80, flags: SYN };
    expect(run(a.dp, buildTcp6(syn), T0).reason).toBe('TX_DNAT_NEW');
    const np = run(
      a.dp,
      buildTcp6({ src: OUT, dst: NODE, sport: 50000, dport: 30080, flags: SYN }),
      T0,
    );
    expect(np.reason).toBe('TX_DNAT_NEW');
    const natPort = (np.pkt[l4Of(np.pkt)]! << 8) | np.pkt[l4Of(np.pkt) + 1]!;

    const b = attachPinned(path, cfg); // nothing loaded: conntrack, SNAT and services as pinned
    const reply = { src: BE, dst: C, sport: 8080, dport: 41000, flags: SYN | ACK };
    expect(run(b.dp, buildTcp6(reply), T0).reason).toBe('TX_REVNAT');
    const masq = { src: BE, dst: NODE, sport: 8080, dport: natPort, flags: SYN | ACK };
    expect(run(b.dp, buildTcp6(masq), T0).reason).toBe('TX_REVSNAT');
    expect(run(b.dp, buildTcp6({ ...syn, flags: ACK }), T0).reason).toBe('TX_DNAT');
    expect(run(b.dp, buildTcp6({ ...syn, sport: 41001 }), T0).reason).toBe('TX_DNAT_NEW');
  });
});
