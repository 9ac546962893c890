// `kubetun trace` (src/node/trace.ts) on a Datapath loaded as the agent loads it: the dry run
// predicts what the next real packet does (backend, conntrack create or hit, rewrite, verdict),
// explains the endpoints, and leaves the live datapath exactly as it was.
import { describe, expect, it } from 'vitest';
import { dpProcess } from '../../src/datapath/program.ts';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { ipv4ToU32 } from '../../src/wire/addr.ts';
import { parseTraceReq, traceAnswer, tracePacket, type TraceReport } from '../../src/node/trace.ts';
import type { ResolvedServicePort } from '../../src/model.ts';
import { endpoint, get32, service, servicePort } from '../datapath/harness.ts';
import { ip6Str, servicePort6 } from '../datapath/harness6.ts';
import { formatTrace } from '../../src/cli/observe.ts';
import { DpLoader } from '../../src/loader/load.ts';

const VIP = '10.96.0.10';
const NOW = 5_000_000;
const WHERE = { node: 'node1' };

function setup(
  over: Parameters<typeof service>[2] = {},
  eps = ['10.244.1.2:8080', '10.244.2.2:8080', '10.244.2.3:8080'],
) {
  const dp = createDatapath({ seed: 7 });
  const e = eps.map((s, i) =>
    endpoint(
      s,
      i === 2
        ? { ready: false, serving: true, terminating: true, nodeName: 'node2' }
        : { nodeName: i === 0 ? 'node1' : 'node2' },
    ),
  );
  const ports: ResolvedServicePort[] = [
    servicePort(service('web', VIP, over), 80, 'TCP', e, 'http'),
  ];
  new DpLoader(dp).load(ports, { nodeName: 'node1' });
  return { dp, ports };
}

function trace(
  dp: Datapath,
  ports: ResolvedServicePort[],
  from: string,
  to = `${VIP}:80`,
  proto = 'tcp',
  now = NOW,
) {
  const r = traceAnswer(dp, { from, to, proto }, now, ports, WHERE);
  if ('error' in r) throw new Error(r.error);
  return r as TraceReport;
}

/** The real packet the trace describes, through the live datapath: its destination after DNAT. */
function realDst(dp: Datapath, from: string, now = NOW): string {
  const p = tracePacket(parseTraceReq({ from, to: `${VIP}:80`, proto: 'tcp' }));
  dpProcess(dp, p, 0, p.length, now);
  const d = get32(p, 16);
  const port = (p[22]! << 8) | p[23]!;
  return `${[d >>> 24, (d >>> 16) & 255, (d >>> 8) & 255, d & 255].join('.')}:${port}`;
}

function fingerprint(dp: Datapath): string {
  const h = (b: ArrayBufferLike) => Buffer.from(new Uint8Array(b)).toString('base64');
  return [
    h(dp.ct.buffer),
    h(dp.aff.buffer),
    h(dp.nat.snat.buffer),
    h(dp.ct6.buffer),
    h(dp.aff6.buffer),
    h(dp.nat.snat6.buffer),
    [...dp.counters].join(','),
    dp.rng.copy().nextU32(),
  ].join('|');
}

describe('kubetun trace', () => {
  it('changes no state: conntrack, affinity, SNAT, counters and the RNG are as before', () => {
    const { dp, ports } = setup({ sessionAffinity: 'ClientIP', affinityTimeoutSeconds: 60 });
    const before = fingerprint(dp);
    for (let i = 0; i < 5; i++) trace(dp, ports, `10.244.1.${10 + i}:4000${i}`);
    expect(fingerprint(dp)).toBe(before);
  });

  it('agrees with the next real packet: backend, create, the DNAT rewrite, the verdict', () => {
    const { dp, ports } = setup();
    for (let i = 0; i < 10; i++) {
      const from = `10.244.1.${20 + i}:5000${i}`;
      const t = trace(dp, ports, from);
      expect([t.verdict, t.reason, t.conntrack.created]).toEqual(['TX', 'TX_DNAT_NEW', true]);
      expect(t.rewrite.after.dst + ':' + t.rewrite.after.dport).toBe(t.backend);
      expect(realDst(dp, from)).toBe(t.backend); // same RNG state, same draw
      // and now the flow exists: the trace says hit, same backend
      const again = trace(dp, ports, from);
      expect([again.conntrack.hit, again.reason, again.backend]).toEqual([
        true,
        'TX_DNAT',
        t.backend,
      ]);
    }
  });

  it('with ClientIP affinity the entry decides, and the trace shows it', () => {
    const { dp, ports } = setup({ sessionAffinity: 'ClientIP', affinityTimeoutSeconds: 60 });
    const first = realDst(dp, '10.244.1.50:1000');
    const t = trace(dp, ports, '10.244.1.50:2000', `${VIP}:80`, 'tcp', NOW + 1000);
    expect(t.affinity).toMatchObject({ backend: first, fresh: true, timeoutSec: 60 });
    expect(t.backend).toBe(first);
    expect(realDst(dp, '10.244.1.50:2000', NOW + 1000)).toBe(first);
  });

  it('explains the endpoints: eligible ones, a terminating one, not local under ITP Local', () => {
    const a = setup();
    const t = trace(a.dp, a.ports, '10.244.1.9');
    expect(t.service?.name).toBe('default/web:http');
    expect(t.service?.frontend).toBe('ClusterIP');
    expect(t.service?.endpoints.map((e) => [e.ip, e.eligible, e.why ?? ''])).toEqual([
      ['10.244.1.2', true, ''],
      ['10.244.2.2', true, ''],
      ['10.244.2.3', false, 'terminating (ready endpoints exist)'],
    ]);
    const b = setup({ internalTrafficPolicy: 'Local' });
    const tl = trace(b.dp, b.ports, '10.244.1.9');
    expect(tl.service?.endpoints.filter((e) => e.eligible).map((e) => e.ip)).toEqual([
      '10.244.1.2',
    ]);
    expect(tl.service?.endpoints[1]?.why).toMatch(/^not local/);
    expect(tl.backend).toBe('10.244.1.2:8080');
  });

  it('a ping to the VIP: dropped with its reason, nothing rewritten', () => {
    const { dp, ports } = setup();
    const t = trace(dp, ports, '10.244.1.9', VIP, 'icmp');
    expect([t.verdict, t.reason, t.rewrite.changed]).toEqual(['DROP', 'DROP_ECHO_TO_VIP', false]);
  });

  it('refuses a bad request naming the field', () => {
    const { dp, ports } = setup();
    const bad = (req: Record<string, unknown>) =>
      (traceAnswer(dp, req, NOW, ports, WHERE) as { error: string }).error;
    expect(bad({ from: '10.0.0.1', to: VIP, proto: 'tcp' })).toMatch(/to: .* needs a port/);
    expect(bad({ from: '10.0.0.300', to: `${VIP}:80` })).toMatch(/from: .* not an IPv4/);
    expect(bad({ from: '10.0.0.1', to: `${VIP}:80`, proto: 'sctp' })).toMatch(/proto/);
    expect(ipv4ToU32(VIP)).toBeGreaterThan(0);
  });

  describe('IPv6', () => {
    const VIP6 = 'fd00:10:96::a';
    const NODE6 = 'fd00:172:30::11';
    function setup6(over: Parameters<typeof service>[2] = {}) {
      const dp = createDatapath({ seed: 7, nodeIp6: NODE6, podCidr6: 'fd00:10:244:1::/64' });
      const web = servicePort6(
        'web6',
        VIP6,
        80,
        'TCP',
        ['[fd00:10:244:1::2]:8080', '[fd00:10:244:2::2]:8080'],
        { type: 'NodePort', ...over },
      );
      web.port.nodePort = 30080;
      web.endpoints6!.forEach((e, i) => {
        e.nodeName = i === 0 ? 'node1' : 'node2';
      });
      const ports = [web];
      new DpLoader(dp).load(ports, { nodeName: 'node1' });
      return { dp, ports };
    }

    it('a SYN to an IPv6 ClusterIP: the backend the next real packet gets, the NAT66 rewrite', () => {
      const { dp, ports } = setup6();
      const from = '[fd00:10:244:1::9]:40000';
      const before = fingerprint(dp);
      const t = trace(dp, ports, from, `[${VIP6}]:80`);
      expect(fingerprint(dp)).toBe(before);
      expect([t.verdict, t.reason, t.conntrack.created]).toEqual(['TX', 'TX_DNAT_NEW', true]);
      expect(t.packet).toEqual({ src: 'fd00:10:244:1::9', dst: VIP6, sport: 40000, dport: 80 });
      expect(t.service).toMatchObject({ name: 'default/web6:p', frontend: 'ClusterIP' });
      expect(t.service!.endpoints.map((e) => e.ip)).toEqual([
        'fd00:10:244:1::2',
        'fd00:10:244:2::2',
      ]);
      // the real packet, through the live datapath: the same backend
      const p = tracePacket(parseTraceReq({ from, to: `[${VIP6}]:80`, proto: 'tcp' }));
      expect(dpProcess(dp, p, 0, p.length, NOW)).toBe(1);
      const real = `[${ip6Str(p, 24)}]:${(p[42]! << 8) | p[43]!}`;
      expect(t.backend).toBe(real);
      expect(`[${t.rewrite.after.dst}]:${t.rewrite.after.dport}`).toBe(real);
      // now the flow exists: a second trace hits it
      const again = trace(dp, ports, from, `[${VIP6}]:80`);
      expect([again.conntrack.hit, again.reason, again.backend]).toEqual([true, 'TX_DNAT', real]);
      const text = formatTrace(again).join('\n');
      expect(text).toContain(`tcp [fd00:10:244:1::9]:40000 -> [${VIP6}]:80 (SYN)`);
      expect(text).toContain('+ [fd00:10:244:1::2]:8080');
    });

    it('a NodePort on the node IPv6 address is found as one; ping -6 to the VIP is dropped', () => {
      const { dp, ports } = setup6();
      const np = trace(dp, ports, '2001:db8::7', `[${NODE6}]:30080`);
      expect(np.service?.frontend).toBe('NodePort');
      expect(np.reason).toBe('TX_DNAT_NEW');
      const ping = trace(dp, ports, 'fd00:10:244:1::9', VIP6, 'icmp');
      expect([ping.proto, ping.verdict, ping.rewrite.changed]).toEqual(['icmpv6', 'DROP', false]);
    });

    it('with ClientIP affinity the IPv6 entry is shown', () => {
      const { dp, ports } = setup6({ sessionAffinity: 'ClientIP' });
      const from = '[fd00:10:244:1::9]:40000';
      const p = tracePacket(parseTraceReq({ from, to: `[${VIP6}]:80`, proto: 'tcp' }));
      dpProcess(dp, p, 0, p.length, NOW);
      const t = trace(dp, ports, '[fd00:10:244:1::9]:40001', `[${VIP6}]:80`);
      expect(t.affinity).toMatchObject({ backend: `[${ip6Str(p, 24)}]:8080`, fresh: true });
      expect(t.backend).toBe(t.affinity!.backend);
    });

    it('refuses mixed families and bad IPv6 text, naming the field', () => {
      const { dp, ports } = setup6();
      const bad = (req: Record<string, unknown>) =>
        (traceAnswer(dp, req, NOW, ports, WHERE) as { error: string }).error;
      expect(bad({ from: '10.0.0.1', to: `[${VIP6}]:80` })).toMatch(/from, to: one is IPv4/);
      expect(bad({ from: 'fd00::1', to: `[fd00::zz]:80` })).toMatch(
        /to: "fd00::zz" is not an IPv6/,
      );
      expect(bad({ from: 'fd00::1', to: VIP6 })).toMatch(/to: .* needs a port \(\[IP\]:PORT\)/);
      expect(bad({ from: 'fd00::1', to: `[${VIP6}]:0` })).toMatch(/to: port "0" is not 1..65535/);
    });
  });
});
