// The comparison's offline parts on fixed packets: decoding, normalisation (what is ignored and
// what is not), the per-point diff with its first difference, deliberate ICMP-error
// differences, flow grouping, and the HTML's ladder diagrams.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { diffPoint, diffRuns, formatPointDiff } from '../../src/lab/compare/diff.ts';
import { renderHtml } from '../../src/lab/compare/html.ts';
import { normaliseRun } from '../../src/lab/compare/normalise.ts';
import { decodeIpv4, type Pkt } from '../../src/lab/compare/packets.ts';
import {
  type CompareReport,
  judge,
  leftOut,
  pickPackets,
  retransmission,
  type ScenarioRun,
} from '../../src/lab/compare/run.ts';
import { formatReport } from '../../src/lab/compare/report.ts';
import { SCENARIOS } from '../../src/lab/compare/scenarios.ts';
import { renderStaticViewSync } from '../../src/lab/control-plane.ts';
import { DEFAULT_TOPOLOGY } from '../../src/lab/lab.ts';
import { labDrawing } from '../../src/lab/show/model.ts';
import { loadTopology } from '../../src/lab/topology.ts';
import { loadManifests, resolveServicePorts } from '../../src/manifests/index.ts';

function tcp(
  src: string,
  dst: string,
  sport: number,
  dport: number,
  flags: string,
  seq: number,
  ack: number,
  extra: Partial<Pkt> = {},
): Pkt {
  return {
    tUs: 0,
    src,
    dst,
    proto: 'tcp',
    ttl: 64,
    ipId: 1,
    df: true,
    ipCsumOk: true,
    sport,
    dport,
    flags,
    seq,
    ack,
    win: 64240,
    opts: 'mss 1460',
    len: 0,
    ...extra,
  };
}

/** A handshake from client port cport with ISNs a and b, IP ids and windows as given. */
function handshake(cport: number, a: number, b: number, ipId: number, win: number): Pkt[] {
  return [
    tcp('10.244.2.3', '10.96.0.10', cport, 80, 'S', a, 0, { ipId, win }),
    tcp('10.96.0.10', '10.244.2.3', 80, cport, 'S.', b, a + 1, { ipId: ipId + 7, win }),
    tcp('10.244.2.3', '10.96.0.10', cport, 80, '.', a + 1, b + 1, { ipId: ipId + 1, win }),
  ];
}

describe('compare: a retransmission makes a scenario run again', () => {
  it('finds a TCP packet seen twice at one capture point (a retransmitted SYN-ACK)', () => {
    const hs = handshake(40001, 1000, 5000, 10, 64240);
    const again = { ...hs[1]!, ipId: 99 }; // the same segment again, another IP id
    const run = normaliseRun([
      { name: 'pod-d veth', packets: hs },
      { name: 'pod-b veth', packets: [hs[0]!, hs[1]!, again, hs[2]!] },
    ]);
    expect(retransmission({ points: run })).toBe(
      'pod-b veth: 10.96.0.10.80 > 10.244.2.3.eph1: tcp [S.] seq 0 ack 1 len 0 <mss 1460> ttl 64 DF',
    );
  });

  it('finds none in a clean handshake, nor across two capture points or two flows', () => {
    const one = handshake(40001, 1000, 5000, 10, 64240);
    const two = handshake(40002, 3, 8, 20, 64240);
    const run = normaliseRun([
      { name: 'a', packets: [...one, ...two] },
      { name: 'b', packets: one },
    ]);
    expect(retransmission({ points: run })).toBeUndefined();
  });
});

describe('compare: a masqueraded attempt`s packets, picked by time', () => {
  // nodeport masquerades: at the backend and the uplinks the client port is gone, so packets
  // are the attempt's by when their flow's SYN came. The client's capture holds the attempt's
  // own SYN: the window starts there, on the capture's clock, whatever this process's clock
  // said (CI: a kubetun leg found no packet of nodeport and hairpin at any point).
  const s = SCENARIOS.find((x) => x.name === 'nodeport')!;
  const T = 1_800_000_000_000_000; // the capture clock, µs
  const at = (tUs: number, p: Pkt): Pkt => ({ ...p, tUs });
  const client = {
    name: 'client eth0 (client)',
    ns: 'c',
    ifname: 'eth0',
    at: { kind: 'client' as const, name: 'client' },
  };
  const backend = {
    name: 'pod-d veth',
    ns: 'n2',
    ifname: 'veth-d',
    pod: 'pod-d',
    at: { kind: 'pod' as const, name: 'pod-d' },
  };
  const captured = [
    {
      point: client,
      packets: [
        at(T, tcp('172.30.0.100', '172.30.0.11', 40001, 30080, 'S', 1, 0)),
        at(T + 900, tcp('172.30.0.11', '172.30.0.100', 30080, 40001, 'S.', 5, 2)),
      ],
    },
    {
      point: backend,
      packets: [
        // an earlier run's flow, before the attempt
        at(T - 3_000_000, tcp('172.30.0.11', '10.244.2.3', 61000, 8080, 'S', 9, 0)),
        // another machine's clock, moved onto this one within its error: a little early
        at(T - 600, tcp('172.30.0.11', '10.244.2.3', 61001, 8080, 'S', 1, 0)),
        at(T + 500, tcp('10.244.2.3', '172.30.0.11', 8080, 61001, 'S.', 5, 2)),
      ],
    },
  ];
  const counts = (startUs: number) =>
    pickPackets(
      s,
      captured,
      [{ ok: true, clientPort: 40001, output: '', startUs, endUs: startUs + 30_000 }],
      [0],
    ).map((p) => p.packets.length);

  it('keeps them when this clock agrees with the capture`s', () => {
    expect(counts(T - 2_000)).toEqual([2, 2]);
  });

  it('keeps them when this clock is off by a step (700 ms either way)', () => {
    expect(counts(T - 700_000)).toEqual([2, 2]);
    expect(counts(T + 700_000)).toEqual([2, 2]);
  });

  it('names the points whose packets were all left out, and the report says so', () => {
    // a failed connect has no client port: its window is this machine's clock alone
    const failed = { ok: false, output: '', startUs: T + 5_000_000, endUs: T + 5_030_000 };
    const picked = pickPackets(s, captured, [failed], [0]);
    const out = leftOut(captured, picked);
    expect(out).toEqual([
      { point: 'client eth0 (client)', captured: 2 },
      { point: 'pod-d veth', captured: 3 },
    ]);
    const run = (mode: 'iptables' | 'kubetun', points: ScenarioRun['points']): ScenarioRun => ({
      mode,
      attempts: [failed],
      kept: [0],
      points,
      leftOut: mode === 'kubetun' ? out : [],
    });
    const full = normaliseRun(
      pickPackets(
        s,
        captured,
        [{ ok: true, clientPort: 40001, output: '', startUs: T, endUs: T + 30_000 }],
        [0],
      ),
    );
    const r = judge(s, 'iptables', run('iptables', full), run('kubetun', normaliseRun(picked)));
    expect(r.verdict).toBe('different');
    const text = formatReport({
      kernel: 'iptables',
      results: [r],
      differences: 1,
      normalisations: [],
    } as unknown as CompareReport);
    expect(text).toContain(
      "kubetun: captured but none the kept attempt's (packets): client eth0 (client) 2, pod-d veth 3",
    );
    expect(text).not.toContain('iptables: captured but none');
  });
});

describe('compare: an endpoint closing in one packet or two', () => {
  const close = (split: boolean) => {
    const hs = handshake(40001, 1000, 5000, 10, 64240);
    const c = '10.244.2.3';
    const v = '10.96.0.10';
    const req = tcp(c, v, 40001, 80, 'P.', 1001, 5001, { len: 10 });
    const resp = tcp(v, c, 80, 40001, 'P.', 5001, 1011, { len: 20 });
    const fin = tcp(c, v, 40001, 80, 'F.', 1011, 5021);
    const ackFin = tcp(v, c, 80, 40001, '.', 5021, 1012);
    const srvFin = tcp(v, c, 80, 40001, 'F.', 5021, 1012);
    const last = tcp(c, v, 40001, 80, '.', 1012, 5022);
    return [...hs, req, resp, fin, ...(split ? [ackFin] : []), srvFin, last];
  };

  it('counts an ACK of the FIN followed by the FIN as the FIN alone', () => {
    const a = normaliseRun([{ name: 'veth', packets: close(true) }]);
    const b = normaliseRun([{ name: 'veth', packets: close(false) }]);
    expect(diffRuns(a, b).every((d) => d.same)).toBe(true);
    expect(a[0]!.packets).toHaveLength(8);
  });

  it('counts the same ACK captured just after the FIN as the FIN alone too (two CPUs)', () => {
    const c = '10.244.2.3';
    const v = '10.96.0.10';
    const fin = tcp(c, v, 40001, 80, 'F.', 1011, 5021);
    const ack = tcp(c, v, 40001, 80, '.', 1011, 5021); // left before the FIN, seen after it
    const split = [...close(false).slice(0, 5), fin, ack, ...close(false).slice(6)];
    const a = normaliseRun([{ name: 'veth', packets: split }]);
    const b = normaliseRun([{ name: 'veth', packets: close(false) }]);
    expect(diffRuns(a, b).every((d) => d.same)).toBe(true);
  });

  it('keeps a pure ACK that a FIN with other numbers follows, and every other packet', () => {
    const pkts = close(true);
    pkts[7] = { ...pkts[7]!, ack: 1011 }; // the server's FIN no longer acks the client's FIN
    expect(normaliseRun([{ name: 'veth', packets: pkts }])[0]!.packets).toHaveLength(9);
    const b = normaliseRun([{ name: 'veth', packets: close(false) }]);
    expect(diffRuns(normaliseRun([{ name: 'veth', packets: pkts }]), b)[0]!.same).toBe(false);
  });
});

describe('compare: normalise and diff', () => {
  it('decodes an IPv4/TCP SYN with its options', () => {
    const b = new Uint8Array([
      0x45, 0, 0, 44, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 10, 244, 2, 3, 10, 96, 0, 10, 0x9c, 0x40, 0,
      80, 0, 0, 0, 100, 0, 0, 0, 0, 0x60, 0x02, 0xfa, 0xf0, 0, 0, 0, 0, 2, 4, 5, 0xb4,
    ]);
    let sum = 0;
    for (let i = 0; i < 20; i += 2) sum += (b[i]! << 8) | b[i + 1]!;
    while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
    const c = ~sum & 0xffff;
    b[10] = c >> 8;
    b[11] = c & 0xff;
    const p = decodeIpv4(b)!;
    expect(p).toMatchObject({
      src: '10.244.2.3',
      dst: '10.96.0.10',
      sport: 40000,
      dport: 80,
      flags: 'S',
      seq: 100,
      opts: 'mss 1460',
      ipCsumOk: true,
      df: true,
      ipId: 0x1234,
    });
    b[8] = 63; // TTL changed, checksum not
    expect(decodeIpv4(b)!.ipCsumOk).toBe(false);
  });

  it('ignores ports, ISNs, IP ids and windows, and nothing else', () => {
    const a = normaliseRun([{ name: 'veth', packets: handshake(40001, 1000, 5000, 10, 64240) }]);
    const b = normaliseRun([{ name: 'veth', packets: handshake(51234, 777777, 99, 4242, 65160) }]);
    expect(diffRuns(a, b).every((d) => d.same)).toBe(true);
    expect(a[0]!.packets[1]!.text).toBe(
      '10.96.0.10.80 > 10.244.2.3.eph1: tcp [S.] seq 0 ack 1 len 0 <mss 1460> ttl 64 DF',
    );
    const ttl = handshake(51234, 9, 9, 1, 1);
    ttl[1]!.ttl = 63;
    const d = diffRuns(a, normaliseRun([{ name: 'veth', packets: ttl }]))[0]!;
    expect(d).toMatchObject({ same: false, deliberate: false, firstDiff: 1 });
  });

  it("normalises the opener's port (client or SNAT, even in the NodePort range), never the server's", () => {
    const snat = [
      tcp('10.244.1.1', '10.244.1.2', 30689, 8080, 'S', 7, 0),
      tcp('10.244.1.2', '10.244.1.1', 8080, 30689, 'S.', 9, 8),
    ];
    const other = [
      tcp('10.244.1.1', '10.244.1.2', 61500, 8080, 'S', 1, 0),
      tcp('10.244.1.2', '10.244.1.1', 8080, 61500, 'S.', 3, 2),
    ];
    const a = normaliseRun([{ name: 'v', packets: snat }]);
    expect(a[0]!.packets[0]!.text).toMatch(/^10\.244\.1\.1\.eph1 > 10\.244\.1\.2\.8080: /);
    expect(a[0]!.packets[1]!.text).toMatch(/^10\.244\.1\.2\.8080 > 10\.244\.1\.1\.eph1: /);
    expect(diffRuns(a, normaliseRun([{ name: 'v', packets: other }]))[0]!.same).toBe(true);
    const np = normaliseRun([
      { name: 'v', packets: [tcp('172.30.0.100', '172.30.0.11', 45000, 30080, 'S', 1, 0)] },
    ]);
    expect(np[0]!.packets[0]!.text).toContain('172.30.0.100.eph1 > 172.30.0.11.30080');
  });

  it('takes ISNs per capture point, so a flow seen mid-stream elsewhere first does not shift them', () => {
    const rst = tcp('10.244.2.3', '10.244.1.3', 40001, 8080, 'R', 1001, 0);
    const syn = tcp('10.244.2.3', '10.244.1.3', 40001, 8080, 'S', 1000, 0);
    const [client, backend] = normaliseRun([
      { name: 'client', packets: [rst] },
      { name: 'backend', packets: [syn] },
    ]);
    expect(client!.packets[0]!.text).toContain('tcp [R] seq 0 ');
    expect(backend!.packets[0]!.text).toContain('tcp [S] seq 0 ');
  });

  it('catches a reply that kept the backend address (no reverse NAT) and shows it packet by packet', () => {
    const good = handshake(40001, 1, 2, 1, 1);
    const broken = handshake(40001, 1, 2, 1, 1);
    broken[1]!.src = '10.244.1.2';
    broken[1]!.sport = 8080;
    const d = diffPoint(
      'pod-d veth',
      normaliseRun([{ name: 'x', packets: good }])[0]!.packets,
      normaliseRun([{ name: 'x', packets: broken }])[0]!.packets,
    );
    expect(d.firstDiff).toBe(1);
    const text = formatPointDiff(d, 'nftables', 'kubetun').join('\n');
    expect(text).toContain('DIFFERENT from packet 2');
    expect(text).toContain('- 2  10.96.0.10.80 > 10.244.2.3.eph1');
    expect(text).toContain('+ 2  10.244.1.2.8080 > 10.244.2.3.eph1');
  });

  it('reports an ICMP error that differs only in source and TTL as deliberate, anything more as different', () => {
    const syn = tcp('10.244.2.3', '10.96.0.30', 40001, 80, 'S', 5, 0);
    const inner = { ...syn };
    const err = (src: string, ttl: number, code = 3): Pkt => ({
      tUs: 0,
      src,
      dst: '10.244.2.3',
      proto: 'icmp',
      ttl,
      ipId: 0,
      df: false,
      ipCsumOk: true,
      len: 28,
      icmpType: 3,
      icmpCode: code,
      inner,
    });
    const k = normaliseRun([{ name: 'v', packets: [syn, err('10.244.2.1', 64)] }])[0]!.packets;
    const t = normaliseRun([{ name: 'v', packets: [syn, err('10.96.0.30', 63)] }])[0]!.packets;
    expect(diffPoint('v', k, t)).toMatchObject({ same: false, deliberate: true, firstDiff: 1 });
    const h = normaliseRun([{ name: 'v', packets: [syn, err('10.96.0.30', 63, 1)] }])[0]!.packets;
    expect(diffPoint('v', k, h).deliberate).toBe(false);
    const run = (mode: 'kubetun' | 'nftables', packets: typeof k): ScenarioRun => ({
      mode,
      attempts: [],
      kept: [],
      points: [{ name: 'v', packets }],
    });
    const s = SCENARIOS.find((x) => x.name === 'no-endpoints')!;
    expect(judge(s, 'nftables', run('nftables', k), run('kubetun', t)).verdict).toBe(
      'expected-difference',
    );
    expect(judge(s, 'nftables', run('nftables', k), run('kubetun', h)).verdict).toBe('different');
    expect(judge(s, 'nftables', run('nftables', k), run('kubetun', k)).verdict).toBe('same');
  });

  it('groups interleaved flows one after the other, keeping each flow in order', () => {
    const f1 = handshake(40001, 1, 2, 1, 1);
    const f2 = handshake(40002, 3, 4, 1, 1);
    const interleaved = [f1[0]!, f1[1]!, f2[0]!, f1[2]!, f2[1]!, f2[2]!];
    const a = normaliseRun([{ name: 'v', packets: [...f1, ...f2] }]);
    const b = normaliseRun([{ name: 'v', packets: interleaved }]);
    expect(diffRuns(a, b)[0]!.same).toBe(true);
    const swapped = [f1[1]!, f1[0]!, f1[2]!];
    expect(
      diffRuns(
        normaliseRun([{ name: 'v', packets: f1 }]),
        normaliseRun([{ name: 'v', packets: swapped }]),
      )[0]!.same,
    ).toBe(false);
  });

  it('groups interleaved IPv6 flows by their own client port (the address has colons too)', () => {
    const v6 = (p: Pkt): Pkt => ({
      ...p,
      src: p.src === '10.244.2.3' ? 'fd00:10:244:2::3' : 'fd00:10:96::28',
      dst: p.dst === '10.244.2.3' ? 'fd00:10:244:2::3' : 'fd00:10:96::28',
    });
    const f1 = handshake(40001, 1, 2, 1, 1).map(v6);
    const f2 = handshake(40002, 3, 4, 1, 1).map(v6);
    const a = normaliseRun([{ name: 'v', packets: [...f1, ...f2] }]);
    const b = normaliseRun([
      { name: 'v', packets: [f1[0]!, f1[1]!, f2[0]!, f1[2]!, f2[1]!, f2[2]!] },
    ]);
    expect(a[0]!.packets.map((p) => p.flow)).toEqual([
      'eph1',
      'eph1',
      'eph1',
      'eph2',
      'eph2',
      'eph2',
    ]);
    expect(diffRuns(a, b)[0]!.same).toBe(true);
  });

  it('draws one ladder per capture point and plane, differences in red', () => {
    const a = normaliseRun([{ name: 'v', packets: handshake(40001, 1, 2, 1, 1) }]);
    const bad = handshake(40001, 1, 2, 1, 1);
    bad[2]!.flags = 'R.';
    const b = normaliseRun([{ name: 'v', packets: bad }]);
    const s = SCENARIOS[0]!;
    const r = judge(
      s,
      'nftables',
      { mode: 'nftables', attempts: [], kept: [], points: a },
      { mode: 'kubetun', attempts: [], kept: [], points: b },
    );
    const html = renderHtml({
      kernel: 'nftables',
      normalisations: ['x'],
      results: [r],
      differences: 1,
    });
    expect(html.match(/<svg class="ladder"/g)).toHaveLength(2);
    expect(html).toContain('stroke="#cf222e"');
    expect(html).toContain('eph1→80 [R.]');
    expect(html).not.toMatch(/(src|href)="https?:/);
  });

  it('names ladder columns by role and draws an expected difference amber, a real one red', () => {
    const t = loadTopology(DEFAULT_TOPOLOGY);
    const view = mkdtempSync(join(tmpdir(), 'kubetun-compare-view-'));
    try {
      const drawing = labDrawing(
        t,
        resolveServicePorts(loadManifests(renderStaticViewSync(t, view))),
      );
      const a = normaliseRun([{ name: 'v', packets: handshake(40001, 1, 2, 1, 1) }]);
      const bad = handshake(40001, 1, 2, 1, 1);
      bad[2]!.flags = 'R.';
      const b = normaliseRun([{ name: 'v', packets: bad }]);
      const run = (mode: 'kubetun' | 'iptables', points: typeof a): ScenarioRun => ({
        mode,
        attempts: [],
        kept: [],
        points,
        captures: [{ at: { kind: 'pod', name: 'pod-d' }, label: 'pod-d veth (client)' }],
      });
      // ping-vip differs on purpose in iptables mode: the scenario's verdict says so
      const ping = SCENARIOS.find((x) => x.name === 'ping-vip')!;
      const expected = judge(ping, 'iptables', run('iptables', a), run('kubetun', b));
      expect(expected.verdict).toBe('expected-difference');
      const real = judge(SCENARIOS[0]!, 'iptables', run('iptables', a), run('kubetun', b));
      expect(real.verdict).toBe('different');
      const page = (r: typeof real) =>
        renderHtml({
          kernel: 'iptables',
          normalisations: [],
          results: [r],
          differences: 0,
          drawing,
        });
      const amber = page(expected);
      expect(amber).toContain('>VIP web</text>');
      expect(amber).toContain('>pod-d</text>');
      expect(amber).toContain('>10.244.2.3</text>');
      expect(amber).toContain('eph1→80 [R.]</text>');
      expect(amber).not.toContain('fill="#cf222e">eph1→80 [R.]');
      expect(amber).toContain('fill="#bf8700">eph1→80 [R.]');
      expect(page(real)).toContain('fill="#cf222e">eph1→80 [R.]');
      // the page opens with the lab drawn, the capture point marked, at the page's width
      expect(amber.indexOf('<svg class="topology"')).toBeLessThan(
        amber.indexOf('<svg class="ladder"'),
      );
      expect(amber).toContain('data-at="pod:pod-d"');
      expect(amber).not.toMatch(/<svg class="ladder"[^>]* width="\d+"/);
    } finally {
      rmSync(view, { recursive: true, force: true });
    }
  });
});
