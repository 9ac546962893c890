// Conntrack on the namespace lab with kubetun on every node (root). The lab's prefix follows
// KUBETUN_LAB_PREFIX, so this runs beside other labs:
//   KUBETUN_LAB_PREFIX=kk- npx vitest run test/lab/conntrack.test.ts
//
//   client pod-c (node2) ──▶ web 10.96.0.10:80 (pod-a, pod-b on node1; pod-c on node2)
//                        ──▶ udp-echo 10.96.0.54:53/UDP (pod-b on node1, pod-d on node2)
//
// - `kubetun ct list` shows a curl's flow with its tuples and TIME_WAIT after the close;
// - a 4000-byte UDP datagram through the VIP is echoed back whole (fragments both ways);
// - with the MTU of node1's veth to pod-b lowered, a DF datagram to the VIP that lands on pod-b
//   brings node1's "need to frag" back to pod-c as VIP -> pod-c quoting pod-c -> VIP:53, and
//   pod-c's kernel learns the path MTU for the VIP;
// - node2's agent restarted with --ct-max 8: new connections fail once the table is full
//   while an established keep-alive connection keeps being served.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { labCtl } from '../../src/lab/ctl.ts';
import { labDown, labUp, remember } from '../../src/lab/lab.ts';
import { startInNs, stopProcess, waitForLog } from '../../src/lab/procs.ts';
import { waitAgent } from '../../src/lab/provision.ts';
import type { LabState } from '../../src/lab/state.ts';
import { allPods, loadTopology } from '../../src/lab/topology.ts';
import { ANSWER_S } from './curl.ts';

const ROOT = join(import.meta.dirname, '../..');
const TOPOLOGY = join(ROOT, 'lab/topology.yaml');
const MAIN = join(ROOT, 'src/cli/main.ts');
const WEB = '10.96.0.10';
const DNS = '10.96.0.54'; // udp-echo
const t = loadTopology(TOPOLOGY);
const node1 = t.nodes[0]!;
const pod = (name: string) => allPods(t).find((p) => p.name === name)!;
const podC = pod('pod-c');

let state: LabState;

function sh(ns: string, script: string, timeout = 60_000): string {
  const r = spawnSync('ip', ['netns', 'exec', ns, 'sh', '-c', script], {
    encoding: 'utf8',
    timeout,
  });
  return `${r.stdout}${r.stderr}`;
}

function agentOf(node: string) {
  return state.processes.find((p) => p.role === 'kubetun' && p.name === node)!;
}

async function counters(node: string): Promise<Record<string, number>> {
  const r = await labCtl<{ counters: Record<string, number> }>(agentOf(node).ctlSocket!, {
    cmd: 'counters',
  });
  return r.counters;
}

interface CtRow {
  proto: string;
  state: string;
  orig: { src: string; dst: string; sport: number; dport: number };
  reply: { src: string; dst: string; sport: number; dport: number };
}

function ctList(node: string): CtRow[] {
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', MAIN, 'ct', 'list', '--json', '--socket', agentOf(node).ctlSocket!],
    { encoding: 'utf8', timeout: 30_000, cwd: ROOT },
  );
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as CtRow[];
}

describe('conntrack through kubetun on the lab', () => {
  beforeAll(async () => {
    await labDown({ topology: TOPOLOGY });
    state = await labUp({ topology: TOPOLOGY, mode: 'kubetun' });
  }, 180_000);

  afterAll(async () => {
    await labDown({ topology: TOPOLOGY });
  }, 60_000);

  it('kubetun ct list shows the curl: pod-c -> VIP:80, backend:8080 -> pod-c (its gateway when hairpinned), TIME_WAIT after the close', () => {
    const out = sh(podC.ns, `curl -sS -m 5 --local-port 45678 http://${WEB}/`).trim();
    const [, backendIp] = out.split(' ');
    expect(allPods(t).map((p) => p.ip)).toContain(backendIp);
    const flow = ctList('node2').find((e) => e.orig.sport === 45678);
    expect(flow).toMatchObject({
      proto: 'TCP',
      state: 'TIME_WAIT',
      orig: { src: podC.ip, dst: WEB, sport: 45678, dport: 80 },
      reply: { src: backendIp, sport: 8080 },
    });
    if (backendIp === podC.ip) {
      // hairpin: pod-c landed on itself, so the reply goes to node2's gateway (masqueraded)
      const node2 = t.nodes.find((n) => n.name === 'node2')!;
      expect(flow!.reply.dst).toBe(node2.gateway);
    } else {
      expect(flow!.reply).toMatchObject({ dst: podC.ip, dport: 45678 });
    }
  });

  it('echoes a 4000-byte UDP datagram through the VIP: fragments translated both ways', async () => {
    const js = `const s=require('dgram').createSocket('udp4');const p=Buffer.alloc(4000,'k');
s.on('message',m=>{const t=m.toString();const i=t.indexOf('\\n');
console.log(t.slice(0,i).split(' ')[0], m.length-i-1, m.subarray(i+1).equals(p));process.exit(0);});
setTimeout(()=>{console.log('timeout');process.exit(0)},3000);s.send(p,53,'${DNS}');`;
    const seen = new Set<string>();
    for (let k = 0; k < 8; k++) {
      const line = sh(podC.ns, `${process.execPath} -e "${js.replace(/"/g, '\\"')}"`).trim();
      const [who, len, same] = line.split(' ');
      expect([len, same], line).toEqual(['4000', 'true']);
      seen.add(who!);
    }
    expect([...seen].every((p) => p === 'pod-b' || p === 'pod-d')).toBe(true);
    const c = await counters('node2');
    expect(c.TX_FRAG).toBeGreaterThan(0);
    expect(c.DROP_FRAG_OUT_OF_ORDER ?? 0).toBe(0);
  });

  it('returns need-to-frag for a DF datagram to the VIP with the VIP as the quoted destination', async () => {
    const podB = pod('pod-b');
    const dev = /dev (\S+)/.exec(sh(node1.ns, `ip -o route get ${podB.ip}`))![1];
    sh(node1.ns, `ip link set dev ${dev} mtu 1200`);
    try {
      const cap = spawn(
        'ip',
        ['netns', 'exec', podC.ns, 'tcpdump', '-l', '-nn', '-v', '-i', 'eth0', 'icmp'],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let dump = '';
      cap.stdout.on('data', (d) => {
        dump += d;
      });
      await new Promise((r) => setTimeout(r, 1000));
      const py = join(mkdtempSync(join(tmpdir(), 'kubetun-ct-')), 'pmtu.py');
      writeFileSync(
        py,
        [
          'import socket',
          'for i in range(40):',
          '  s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)',
          '  s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER = IP_PMTUDISC_DO',
          `  s.connect(("${DNS}", 53))`,
          '  s.settimeout(0.3)',
          '  try:',
          "    s.send(b'p' * 1400)  # fits pod-c's 1500, not node1's 1200 towards pod-b",
          '    s.recv(4096)',
          '  except OSError:',
          '    pass',
          '  mtu = s.getsockopt(socket.IPPROTO_IP, 14)  # IP_MTU: what the kernel learnt',
          '  if mtu < 1500:',
          "    print('mtu', mtu)",
          '    break',
        ].join('\n'),
      );
      const out = sh(podC.ns, `python3 ${py}`);
      rmSync(dirname(py), { recursive: true, force: true });
      await new Promise((r) => setTimeout(r, 500));
      cap.kill('SIGTERM');
      expect(out.trim()).toBe('mtu 1200');
      expect(dump).toMatch(
        new RegExp(`${DNS} > ${podC.ip}: ICMP ${DNS} unreachable - need to frag \\(mtu 1200\\)`),
      );
      expect(dump).toMatch(new RegExp(`${podC.ip}\\.\\d+ > ${DNS.replace(/\./g, '\\.')}\\.53: `));
      expect((await counters('node2')).TX_ICMP_ERR_REVNAT).toBeGreaterThan(0);
    } finally {
      sh(node1.ns, `ip link set dev ${dev} mtu 1500`);
    }
  }, 60_000);

  it('--ct-max 8: new connections fail while an established one keeps going', async () => {
    const old = agentOf('node2');
    await stopProcess(old);
    state.processes = state.processes.filter((p) => p !== old);
    const argv = [...old.argv, '--ct-max', '8'];
    const p = startInNs('kubetun', 'node2', old.ns, argv, old.log);
    p.ctlSocket = old.ctlSocket;
    remember(state, p);
    await waitAgent(p);
    // One keep-alive connection asking every 200 ms (the server's keep-alive timeout is 1 s);
    // each response prints "ok <pod>" (the body follows a chunk-size line).
    const js = `const s=require('net').connect(80,'${WEB}');let b='';
const ask=()=>s.write('GET / HTTP/1.1\\r\\nHost: web\\r\\n\\r\\n');s.on('connect',ask);
s.on('data',d=>{b+=d;let m;while((m=/\\r\\n\\r\\n(?:[0-9a-f]+\\r\\n)?(pod-[a-z]+) /.exec(b))){console.log('ok',m[1]);b=b.slice(m.index+m[0].length);setTimeout(ask,200);}});
s.on('error',e=>console.log('error',e.code));s.on('close',()=>console.log('closed'));`;
    const keep: ChildProcess = spawn('ip', ['netns', 'exec', podC.ns, process.execPath, '-e', js], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const lines: string[] = [];
    createInterface({ input: keep.stdout! }).on('line', (l) => lines.push(l));
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    try {
      for (let w = 0; w < 50 && lines.length === 0; w++) await sleep(100);
      expect(lines[0]).toMatch(/^ok pod-/);
      const results: string[] = [];
      for (let k = 0; k < 10; k++) {
        const limit = k < 7 ? ANSWER_S : 1; // must answer / must time out (test/lab/curl.ts)
        results.push(
          sh(podC.ns, `curl -sS -m ${limit} http://${WEB}/ >/dev/null 2>&1; echo $?`).trim(),
        );
      }
      expect(results.slice(0, 7)).toEqual(Array(7).fill('0')); // 1 + 7 flows fill 8 entries
      expect(results.slice(7)).toEqual(['28', '28', '28']); // SYN dropped: curl times out
      const during = lines.length;
      await sleep(1000);
      expect(lines.length).toBeGreaterThan(during + 2); // still answered after the table filled
      expect(new Set(lines)).toEqual(new Set([lines[0]])); // same backend, never closed
      expect((await counters('node2')).DROP_CT_FULL).toBeGreaterThan(0);
      await waitForLog(p, /kubetun conntrack: table full, dropping packet/, 5000);
    } finally {
      keep.kill('SIGTERM');
    }
  }, 90_000);
});
