// Root test (issue 19 point 6): one SCTP association through a ClusterIP, first through the
// kernel programmed with kube-proxy's iptables rules, then through `kubetun run` on the same
// node — and every packet either backend or client receives must be the same bytes, with the
// same conntrack state after each chunk (`conntrack -L` there, the agent's ct table here).
//
//   client 10.244.1.10:40000 ──INIT, COOKIE ECHO, DATA, SHUTDOWN, SHUTDOWN COMPLETE──▶
//        10.96.0.60:9000 ──(kernel DNAT | kubetun DNAT)──▶ be1 10.244.1.11:9900
//   client ◀──INIT ACK, COOKIE ACK, SACK, SHUTDOWN ACK── (reverse NAT) ◀── be1
//
// This kernel has no SCTP sockets: both ends are test/fixtures/sctp-peer.py (raw sockets),
// the packets crafted here with src/wire's emitters. The kernel's conntrack verifies each
// CRC32c (a bad one gets no NAT) and its NAT recomputes it after the port change, so equal
// bytes mean kubetun's CRC32c, ports, addresses and TTL handling equal the kernel's.
// Topology: topo.ts (names ktr-<pid>-…); the SCTP Service is an extra manifest file.

import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface, type Interface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadManifests, resolveServicePorts } from '../../src/manifests/index.ts';
import { ctlRequest } from '../../src/node/ctl.ts';
import type { CtEntry } from '../../src/node/inspect.ts';
import { renderIptables } from '../../src/rules/iptables.ts';
import { renderJumpCommands } from '../../src/rules/jumps.ts';
import { ipv4ToU32 } from '../../src/wire/addr.ts';
import { ipv4Emit } from '../../src/wire/ipv4.ts';
import { IPPROTO_SCTP } from '../../src/wire/proto.ts';
import {
  type SctpChunkRepr,
  sctpCrcValid,
  sctpDstPort,
  sctpEmit,
  sctpEmitLen,
  sctpSrcPort,
} from '../../src/wire/sctp.ts';
import { NODE_IP, Topo } from './topo.ts';

const VIP = '10.96.0.60';
const CLIENT = '10.244.1.10';
const BE = '10.244.1.11';
const TAG_C = 0x1a2b3c4d; // the client's initiate tag: be1's packets carry it
const TAG_B = 0x5e6f7081; // be1's

const SERVICE = `apiVersion: v1
kind: Service
metadata: {name: sigtran, namespace: default}
spec:
  clusterIP: ${VIP}
  selector: {app: sigtran}
  ports: [{name: m3ua, port: 9000, targetPort: 9900, protocol: SCTP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: sigtran-1, namespace: default, labels: {kubernetes.io/service-name: sigtran}}
addressType: IPv4
ports: [{name: m3ua, port: 9900, protocol: SCTP}]
endpoints:
  - {addresses: [${BE}], conditions: {ready: true}, nodeName: node1}
`;

const u32 = (...v: number[]) => {
  const b = new Uint8Array(v.length * 4);
  v.forEach((x, k) => {
    b[k * 4] = x >>> 24;
    b[k * 4 + 1] = x >>> 16;
    b[k * 4 + 2] = x >>> 8;
    b[k * 4 + 3] = x;
  });
  return b;
};
const cat = (...a: Uint8Array[]) => Uint8Array.from(a.flatMap((x) => [...x]));
const ch = (type: number, value: Uint8Array = new Uint8Array(0), flags = 0): SctpChunkRepr => ({
  type,
  flags,
  value,
});
const COOKIE = u32(0xc0ffee01, 0x00c0ffee);
// initiate tag, a_rwnd, OS << 16 | MIS, initial TSN; then one parameter
const INIT = ch(1, cat(u32(TAG_C, 106496, (10 << 16) | 65535, 1000), u32((12 << 16) | 6, 5 << 16)));
const INIT_ACK = ch(2, cat(u32(TAG_B, 106496, (10 << 16) | 10, 5000), u32((7 << 16) | 12), COOKIE));
const DATA = ch(0, cat(u32(1000, 0, 0), new TextEncoder().encode('hello sctp')), 3);
const SACK = ch(3, u32(1000, 106496, 0));

/** [sender, chunks]: the association, chunk by chunk. */
const STEPS: ['client' | 'be1', SctpChunkRepr[]][] = [
  ['client', [INIT]],
  ['be1', [INIT_ACK]],
  ['client', [ch(10, COOKIE)]], // COOKIE ECHO
  ['be1', [ch(11)]], // COOKIE ACK
  ['client', [DATA]],
  ['be1', [SACK]],
  ['client', [ch(7, u32(4999))]], // SHUTDOWN
  ['be1', [ch(8)]], // SHUTDOWN ACK
  ['client', [ch(14)]], // SHUTDOWN COMPLETE
];
const KERNEL_STATES = [
  'CLOSED',
  'COOKIE_WAIT',
  'COOKIE_ECHOED',
  'ESTABLISHED',
  'ESTABLISHED',
  'ESTABLISHED',
  'SHUTDOWN_SENT',
  'SHUTDOWN_ACK_SENT',
  'CLOSED',
];

function packet(from: 'client' | 'be1', chunks: SctpChunkRepr[], k: number): string {
  const c = from === 'client';
  const repr = {
    srcPort: c ? 40000 : 9900,
    dstPort: c ? 9000 : 40000,
    vtag: k === 0 ? 0 : c ? TAG_B : TAG_C,
    chunks,
  };
  const l4 = sctpEmitLen(repr);
  const b = new Uint8Array(20 + l4);
  ipv4Emit(
    {
      tos: 0,
      id: 0x4000 + k,
      df: true,
      mf: false,
      fragOffset: 0,
      ttl: 64,
      proto: IPPROTO_SCTP,
      src: ipv4ToU32(c ? CLIENT : BE),
      dst: ipv4ToU32(c ? VIP : CLIENT),
      options: new Uint8Array(0),
      payloadLen: l4,
    },
    b,
    0,
  );
  sctpEmit(repr, b, 20);
  return Buffer.from(b).toString('hex');
}

const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const PEER = fileURLToPath(new URL('../fixtures/sctp-peer.py', import.meta.url));

/** sctp-peer.py in a namespace, one JSON request / answer at a time. */
class Peer {
  private readonly lines: AsyncIterator<string>;
  private readonly rl: Interface;
  constructor(readonly proc: ChildProcess) {
    this.rl = createInterface({ input: proc.stdout! });
    this.lines = this.rl[Symbol.asyncIterator]();
  }
  async ask(req: object): Promise<Record<string, unknown>> {
    this.proc.stdin!.write(`${JSON.stringify(req)}\n`);
    return this.answer();
  }
  async answer(): Promise<Record<string, unknown>> {
    const r = await this.lines.next();
    if (r.done) throw new Error('sctp-peer.py exited');
    return JSON.parse(r.value);
  }
}

const t = new Topo();
const peers: Record<string, Peer> = {};

async function startPeer(name: 'client' | 'be1'): Promise<void> {
  const p = spawn('ip', ['netns', 'exec', t.ns(name), 'python3', PEER], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  peers[name] = new Peer(p);
  expect(await peers[name].answer()).toEqual({ ready: true });
}

interface Run {
  received: string[];
  states: string[];
}

async function exchange(state: () => Promise<string>): Promise<Run> {
  const run: Run = { received: [], states: [] };
  for (const [k, [from, chunks]] of STEPS.entries()) {
    const to = from === 'client' ? 'be1' : 'client';
    await peers[from].ask({ op: 'send', hex: packet(from, chunks, k) });
    const got = (await peers[to].ask({ op: 'recv', timeout: 3 })).hex as string | null;
    run.received.push(got ?? `step ${k}: nothing arrived`);
    run.states.push(await state());
  }
  return run;
}

const kernelState = async () => {
  const out = t.must('node', ['conntrack', '-L', '-p', 'sctp']).trim();
  return out.split(/\s+/)[3] ?? 'none';
};
const kubetunState = async () => {
  const { entries } = (await ctlRequest(t.socket, { cmd: 'ct' })) as { entries: CtEntry[] };
  const e = entries.find((x) => x.proto === 'SCTP' && x.orig.dst === VIP);
  return e?.state ?? 'none';
};

let kernel: Run;
let kubetun: Run;

describe('SCTP through a ClusterIP: the kernel with kube-proxy rules vs kubetun (root)', () => {
  beforeAll(async () => {
    await t.setup();
    const file = join(t.manifests, 'sigtran.yaml');
    writeFileSync(file, SERVICE);
    await startPeer('client');
    await startPeer('be1');
    // the kernel: kube-proxy's iptables rules for the SCTP Service, nothing else
    const ports = resolveServicePorts(loadManifests(file));
    const rules = renderIptables(ports, {
      clusterCIDR: '10.244.0.0/16',
      nodeName: 'node1',
      nodeIPs: [NODE_IP],
      nfacct: false,
    });
    expect(rules).toMatch(/-p sctp .*--dport 9000/);
    t.exec('node', ['iptables-restore', '--noflush'], 15_000, rules);
    t.exec('node', ['sh', '-e'], 15_000, renderJumpCommands());
    kernel = await exchange(kernelState);
    // then kubetun, on a clean node: rules and conntrack gone
    for (const table of ['nat', 'filter']) {
      t.must('node', ['iptables', '-t', table, '-F']);
      t.must('node', ['iptables', '-t', table, '-X']);
    }
    t.exec('node', ['conntrack', '-F']);
    await t.startAgent();
    kubetun = await exchange(kubetunState);
  }, 180_000);

  afterAll(async () => {
    for (const p of Object.values(peers)) p.proc.stdin!.end();
    await t.teardown();
  });

  it('the kernel DNATs and reverse-NATs each chunk with a fresh CRC32c, through its SCTP states', () => {
    expect(kernel.states).toEqual(KERNEL_STATES);
    for (const [k, hex] of kernel.received.entries()) {
      const b = Buffer.from(hex, 'hex');
      expect(sctpCrcValid(b, 20, b.length), `step ${k}`).toBe(true);
      const toBe = STEPS[k][0] === 'client';
      expect(toBe ? sctpDstPort(b, 20) : sctpSrcPort(b, 20), `step ${k}`).toBe(toBe ? 9900 : 9000);
    }
  });

  it('kubetun delivers the same bytes to both ends and shows the same conntrack states', () => {
    expect(kubetun.received).toEqual(kernel.received);
    expect(kubetun.states).toEqual(kernel.states);
  });

  it("`kubetun ct list --proto sctp` shows the closed association in conntrack -L's format", () => {
    const r = spawnSync(
      process.execPath,
      ['--import', 'tsx', MAIN, 'ct', 'list', '--proto', 'sctp', '--socket', t.socket],
      { encoding: 'utf8', timeout: 30_000 },
    );
    expect(r.status).toBe(0);
    const line = new RegExp(
      `^sctp +132 \\d+ CLOSED src=${CLIENT} dst=${VIP} sport=40000 dport=9000 packets=5 ` +
        `bytes=\\d+ src=${BE} dst=${CLIENT} sport=9900 dport=40000 packets=4 bytes=\\d+ ` +
        '\\[ASSURED\\] mark=0 use=1$',
    );
    expect(r.stdout.trimEnd().split('\n')).toEqual([expect.stringMatching(line)]);
  });
});
