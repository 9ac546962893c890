// Root test: kubetun steers only what needs translation (issue 15, point 2), on the one-node
// topology of topo.ts with a NodePort web-np 30080 (TCP and UDP) → be1/be2:8080.
//
//   pod to pod with no Service: never reaches the TUN (agent and TUN counters stay still)
//   a direct connection to an endpoint's own address and port (not through its VIP), to a local
//     and to a remote endpoint: never reaches the TUN either — its replies look like a translated
//     flow's to tc, but the kernel's conntrack knows the flow was not (steer-replies.ts)
//   node → its own IP:NodePort (Kubernetes e2e "Granular Checks: Services should function for
//     node-Service: http / udp"): lo's egress is bound to the pods' tc block, whose NodePort
//     filter sends it to the TUN; without the binding it breaks
//   pod → its node's IP:NodePort: the block's NodePort filter; without it it breaks
//   endpoints come and go: entries follow in the block's hash table, one per endpoint, however
//     many Services share it
import { spawn } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ctlRequest } from '../../src/node/ctl.ts';
import { NODE_IP, Topo } from './topo.ts';

const t = new Topo();
/** an HTTP GET with an IP option on every packet (test/fixtures/http-opts.py) */
const HTTP_OPTS = join(import.meta.dirname, '../fixtures/http-opts.py');
const NP = `${NODE_IP}:30080`;

const NODEPORT = `apiVersion: v1
kind: Service
metadata: {name: web-np, namespace: default}
spec:
  type: NodePort
  clusterIP: 10.96.0.50
  selector: {app: web}
  ports:
    - {name: http, port: 80, targetPort: 8080, nodePort: 30080, protocol: TCP}
    - {name: dns, port: 80, targetPort: 8080, nodePort: 30080, protocol: UDP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-np-1, namespace: default, labels: {kubernetes.io/service-name: web-np}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}, {name: dns, port: 8080, protocol: UDP}]
endpoints:
  - {addresses: [10.244.1.11], conditions: {ready: true}, nodeName: node1}
  - {addresses: [10.244.1.12], conditions: {ready: true}, nodeName: node1}
`;

/** A UDP server on :8080 answering its pod's name (beside the HTTP one). */
const UDP_SERVER = `const s = require('dgram').createSocket('udp4');
s.on('message', (m, r) => s.send(process.argv[1], r.port, r.address));
s.bind(8080, () => process.stdout.write('up\\n'));`;

/** One UDP datagram to host:port, prints the answer (exit 1 when none comes in 2 s). */
const UDP_CLIENT = `const [h, p] = process.argv[1].split(':');
const s = require('dgram').createSocket('udp4');
s.on('message', (m) => { process.stdout.write(m.toString()); process.exit(0); });
s.send('hi', Number(p), h);
setTimeout(() => process.exit(1), 2000);`;

const udp = (from: string, to: string) =>
  t.exec(from, [process.execPath, '-e', UDP_CLIENT, to], 10_000);
const http = (from: string, to: string) => t.curl(from, `http://${to}/`, 2);

/** packets the agent read, and the TUN's own count of what the kernel handed it */
/**
 * The agent's packet count and the TUN's tx_packets, once the agent has read everything the
 * kernel queued (a connection's last ACK may still be in the queue right after curl exits: a
 * sample taken then saw read 9 of tx 11 and the next one 11 of 11, as if traffic had arrived).
 */
async function tunSeen(): Promise<{ read: number; tx: number }> {
  for (let i = 0; ; i++) {
    const st = (await ctlRequest(t.socket, { cmd: 'status' })) as { packets: number };
    const tx = Number(t.must('node', ['cat', '/sys/class/net/kt0/statistics/tx_packets']).trim());
    if (st.packets >= tx || i === 50) return { read: st.packets, tx };
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * tunSeen once the TUN has been still for 300 ms: a finished curl's last ACK can reach the TUN
 * after curl exits, and would be taken for pod-to-pod traffic counted later (seen under load).
 */
async function tunSettled(): Promise<{ read: number; tx: number }> {
  let last = await tunSeen();
  for (let i = 0; i < 20; i++) {
    await new Promise((r) => setTimeout(r, 300));
    const now = await tunSeen();
    if (now.read === last.read && now.tx === last.tx) return now;
    last = now;
  }
  return last;
}

/** tc's view of the pods' block (every table entry matches on the source address at 12). */
const blockShow = () => t.must('node', ['tc', 'filter', 'show', 'block', '7700']);

/** Switch something off, show the request fails, switch it back on, show it works again. */
function breaksWithout(
  off: () => void,
  on: () => void,
  req: () => { status: number | null; out: string },
) {
  off();
  let r: ReturnType<typeof req>;
  try {
    r = req();
  } finally {
    on();
  }
  expect(r.status).not.toBe(0);
  expect(req().out).toMatch(/^be[12]$/);
}

beforeAll(async () => {
  await t.setup();
  writeFileSync(join(t.manifests, 'web-np.yaml'), NODEPORT);
  for (const b of ['be1', 'be2']) {
    const p = spawn('ip', ['netns', 'exec', t.ns(b), process.execPath, '-e', UDP_SERVER, b], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    t.adopt(p);
    await new Promise<void>((res, rej) => {
      p.stdout!.once('data', () => res());
      p.once('exit', (code) => rej(new Error(`udp server ${b} exited (${code})`)));
    });
  }
  await t.startAgent();
});

afterAll(() => t.teardown());

describe('kubetun steers only what needs translation', () => {
  it('pod-to-pod traffic no Service touches never reaches the TUN', async () => {
    // live counters: a VIP request moves both
    const a = await tunSeen();
    expect(http('client', '10.96.0.10').out).toMatch(/^be[12]$/);
    const b = await tunSettled();
    expect(b.read).toBeGreaterThan(a.read);
    expect(b.tx).toBeGreaterThan(a.tx);
    // ping both ways, TCP to a port no Service names (refused: the RST comes back too), and
    // a backend pod as a client of another pod
    expect(
      t.exec('client', ['ping', '-c', '3', '-i', '0.2', '-W', '1', '10.244.1.11']).status,
    ).toBe(0);
    expect(t.exec('be2', ['ping', '-c', '3', '-i', '0.2', '-W', '1', '10.244.1.10']).status).toBe(
      0,
    );
    expect(t.curl('client', 'http://10.244.1.11:9/', 2).status).toBe(7);
    expect(t.curl('be1', 'http://10.244.1.10:9/', 2).status).toBe(7);
    expect(await tunSeen()).toEqual(b);
  });

  it("a direct connection to an endpoint's address and port never reaches the TUN", async () => {
    const a = await tunSettled();
    // be1 and be2 are web's endpoints (:8080), 10.244.2.10 far's, on the other node
    for (let i = 0; i < 5; i++) {
      expect(http('client', '10.244.1.11:8080').out).toBe('be1');
      expect(http('be2', '10.244.1.11:8080').out).toBe('be1');
      expect(http('client', '10.244.2.10:8080').out).toBe('remote');
      expect(udp('client', '10.244.1.12:8080').out).toBe('be2');
    }
    expect(await tunSettled()).toEqual(a);
    // and the same endpoint through its VIP does
    expect(http('client', '10.96.0.10').out).toMatch(/^be[12]$/);
    expect((await tunSettled()).read).toBeGreaterThan(a.read);
  });

  it('serves the node sending to its own IP:NodePort, TCP and UDP (e2e node-Service)', () => {
    expect(http('node', NP).out).toMatch(/^be[12]$/);
    expect(udp('node', NP).out).toMatch(/^be[12]$/);
  });

  it("without lo's egress bound to the pods' block, node → own NodePort breaks", () => {
    breaksWithout(
      () => t.must('node', ['tc', 'qdisc', 'del', 'dev', 'lo', 'clsact']),
      () => t.must('node', ['tc', 'qdisc', 'add', 'dev', 'lo', 'egress_block', '7700', 'clsact']),
      () => http('node', NP),
    );
  });

  it("serves a pod sending to its node's IP:NodePort; without the block's NodePort filter it breaks", () => {
    expect(http('client', NP).out).toMatch(/^be[12]$/);
    const saved = blockShow();
    expect(saved).toContain('pref 7702');
    const keys = [
      [0x7530, 0xfff0],
      [0x7540, 0xffc0],
      [0x7580, 0xff80],
      [0x7600, 0xfe00],
      [0x7800, 0xf800],
    ];
    const match = (v: number, m: number) => [
      ...['match', 'ip', 'dst', `${NODE_IP}/32`, 'match', 'ip', 'protocol', '6', '0xff'],
      ...['match', 'u8', '0x05', '0x0f', 'at', '0'],
      ...['match', 'ip', 'dport', `0x${v.toString(16)}`, `0x${m.toString(16)}`],
    ];
    breaksWithout(
      () => t.must('node', ['tc', 'filter', 'del', 'block', '7700', 'pref', '7702']),
      () => {
        for (const [v, m] of keys) {
          t.must('node', [
            ...['tc', 'filter', 'add', 'block', '7700', 'pref', '7702', 'protocol', 'ip', 'u32'],
            ...match(v, m),
            ...['action', 'mirred', 'egress', 'redirect', 'dev', 'kt0'],
          ]);
        }
      },
      () => http('client', NP),
    );
  });

  it('serves a NodePort connection whose packets carry IP options (pref 7707); not without it', () => {
    const opts = () =>
      t.exec('client', ['python3', HTTP_OPTS, NODE_IP, '30080'], 10_000) as {
        status: number | null;
        out: string;
      };
    expect(opts().out).toMatch(/^be[12]$/);
    const saved = t.must('node', ['tc', '-j', 'filter', 'show', 'block', '7700', 'pref', '7707']);
    expect(JSON.parse(saved).length).toBeGreaterThan(0);
    t.must('node', ['tc', 'filter', 'del', 'block', '7700', 'pref', '7707']);
    try {
      // the SYN bypasses the NodePort keys (IHL 6) and meets the node's own stack: refused
      expect(opts().status).not.toBe(0);
    } finally {
      for (const ihl of [6, 7, 8, 9, 10, 11, 12, 13, 14, 15]) {
        t.must('node', [
          ...['tc', 'filter', 'add', 'block', '7700', 'pref', '7707', 'protocol', 'ip', 'u32'],
          ...['match', 'ip', 'dst', `${NODE_IP}/32`],
          ...['match', 'u8', `0x${ihl.toString(16)}`, '0x0f', 'at', '0'],
          ...['action', 'mirred', 'egress', 'redirect', 'dev', 'kt0'],
        ]);
      }
    }
    expect(opts().out).toMatch(/^be[12]$/);
  });

  it('entries follow the endpoints, one per endpoint however many Services share it', async () => {
    const entries = () => blockShow().match(/^filter .* fh 7[12]:[0-9a-f]+:[0-9a-f]+ /gm)?.length;
    const before = entries();
    // be1:8080 TCP/UDP, be2:8080 TCP/UDP, far's 10.244.2.10:8080 TCP, and ICMP errors (2 types)
    // from each of the three addresses
    expect(before).toBe(11);
    // 20 more Services onto the same endpoints: not one filter more
    const many = Array.from({ length: 20 }, (_, i) =>
      NODEPORT.replaceAll('web-np', `dup${i}`)
        .replace('10.96.0.50', `10.96.1.${i + 1}`)
        .replace('nodePort: 30080, protocol: TCP', `nodePort: ${30100 + i}, protocol: TCP`)
        .replace('nodePort: 30080, protocol: UDP', `nodePort: ${30100 + i}, protocol: UDP`),
    ).join('---\n');
    writeFileSync(join(t.manifests, 'dup.yaml'), many);
    expect(await ctlRequest(t.socket, { cmd: 'reload' })).toMatchObject({ services: 24 });
    expect(entries()).toBe(before);
    // a new endpoint port: its entry appears (be2 10.244.1.12 = 0a f4 01 0c, port 9090 = 2382)
    const extra = readFileSync(join(t.manifests, 'web-np.yaml'), 'utf8')
      .replaceAll('web-np', 'extra')
      .replace('10.96.0.50', '10.96.0.51')
      .replace(/nodePort: 30080, protocol: UDP/, 'nodePort: 30090, protocol: UDP')
      .replace(/nodePort: 30080, protocol: TCP/, 'nodePort: 30091, protocol: TCP')
      .replace(/port: 8080, protocol: TCP\}/, 'port: 9090, protocol: TCP}');
    writeFileSync(join(t.manifests, 'extra.yaml'), extra);
    await ctlRequest(t.socket, { cmd: 'reload' });
    expect(entries()).toBe(before! + 2);
    expect(blockShow()).toMatch(
      /match 0af4010c\/ffffffff at 12\n(.*\n){2}.*match 23820000\/ffff0000 at 20/,
    );
    rmSync(join(t.manifests, 'extra.yaml'));
    rmSync(join(t.manifests, 'dup.yaml'));
    await ctlRequest(t.socket, { cmd: 'reload' });
    expect(entries()).toBe(before);
    expect(blockShow()).not.toContain('23820000/ffff0000');
    // and the Service still works through the incrementally kept table
    expect(http('client', '10.96.0.10').out).toMatch(/^be[12]$/);
  });
});
