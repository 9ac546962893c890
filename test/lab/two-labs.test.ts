// Two labs side by side (root): one prefix governs everything a lab owns (src/lab/prefix.ts),
// so two labs built from the same topology — same pod IPs, same VIPs, same node names — never
// cross. Every inspect command is run against each through the real CLI with only
// KUBETUN_LAB_PREFIX set, and each must answer from its own lab; then `lab down` of one leaves
// the other working, and of both leaves nothing behind: no namespace, socket, state or log.
//
//   lab A (KUBETUN_LAB_PREFIX, default kt-)      lab B (KUBETUN_LAB_PREFIX_B, default <A>2-)
//   A-node1 A-node2 A-pod-a … /run/kubetun<A>    B-node1 B-node2 B-pod-a … /run/kubetun<B>
//
// Run beside other labs: KUBETUN_LAB_PREFIX=kg- KUBETUN_LAB_PREFIX_B=kh- npx vitest run
// test/lab/two-labs.test.ts
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '../..');
const A = process.env.KUBETUN_LAB_PREFIX || 'kt-';
const B = process.env.KUBETUN_LAB_PREFIX_B || `${A.replace(/-+$/, '')}2-`;
/** Each test runs a dozen CLI commands; on a loaded 2-core machine one takes seconds. */
const SLOW = 600_000;

/** The lab paths the prefix implies (src/lab/prefix.ts), spelled out here as the oracle. */
function paths(prefix: string): { labDir: string; ctlDir: string } {
  const s = prefix === 'kt-' ? '' : `-${prefix.replace(/-+$/, '')}`;
  return { labDir: `/run/kubetun-lab${s}`, ctlDir: `/run/kubetun${s}` };
}

interface Run {
  out: string;
  err: string;
  status: number;
}

/** The CLI as a user runs it, with only the prefix chosen (no directory overrides). */
function kubetun(prefix: string, args: string[], timeout = 180_000): Run {
  const env: NodeJS.ProcessEnv = { ...process.env, KUBETUN_LAB_PREFIX: prefix };
  delete env.KUBETUN_CTL_DIR;
  delete env.KUBETUN_LAB_DIR;
  const r = spawnSync(process.execPath, [join(ROOT, 'bin/kubetun.mjs'), ...args], {
    encoding: 'utf8',
    env,
    timeout,
  });
  return { out: r.stdout ?? '', err: r.stderr ?? '', status: r.status ?? -1 };
}

function netns(prefix: string): string[] {
  const r = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  return r.stdout
    .split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter((n) => n.startsWith(prefix));
}

const ctCount = (prefix: string, node: string) =>
  Number(kubetun(prefix, ['ct', 'count', '--node', node]).out.trim());

describe.skipIf(process.getuid?.() !== 0)('two labs side by side', () => {
  beforeAll(() => {
    for (const p of [A, B]) kubetun(p, ['lab', 'down']);
    for (const p of [A, B]) {
      const r = kubetun(p, ['lab', 'up']);
      expect(r.status, r.err).toBe(0);
    }
  }, 600_000);
  afterAll(() => {
    for (const p of [A, B]) kubetun(p, ['lab', 'down']);
  }, 300_000);

  it(
    'each lab has its own namespaces, state directory and control sockets',
    () => {
      for (const p of [A, B]) {
        const ns = netns(p);
        expect(ns).toContain(`${p}node1`);
        expect(ns).toContain(`${p}pod-a`);
        const { labDir, ctlDir } = paths(p);
        expect(existsSync(join(labDir, 'state.json'))).toBe(true);
        expect(existsSync(join(ctlDir, 'node1.sock'))).toBe(true);
        expect(existsSync(join(ctlDir, 'node2.sock'))).toBe(true);
      }
      expect(paths(A).ctlDir).not.toBe(paths(B).ctlDir);
    },
    SLOW,
  );

  it(
    'ct list / count / flush answer from their own lab only',
    async () => {
      for (const p of [A, B]) expect(kubetun(p, ['ct', 'flush', '--node', 'node1']).status).toBe(0);
      // A slow download keeps one flow ESTABLISHED through lab A's node1 for the whole test (a
      // closed curl's TIME_WAIT entry can expire while a loaded machine runs the commands).
      const url = 'http://10.96.0.10:80/bytes?n=1000000000';
      const dl = spawn(
        'ip',
        ['netns', 'exec', `${A}pod-a`, 'curl', '-sS', '--limit-rate', '1k', '-o', '/dev/null', url],
        { stdio: 'ignore' },
      );
      try {
        for (let i = 0; i < 60 && ctCount(A, 'node1') < 1; i++) await sleep(1000);
        // The flow went through lab A's node1 only: B's node1 (same name, same VIP) saw nothing.
        expect(ctCount(A, 'node1')).toBeGreaterThanOrEqual(1);
        expect(ctCount(B, 'node1')).toBe(0);
        const list = kubetun(A, ['ct', 'list', '--node', 'node1', '--dst', '10.96.0.10']);
        expect(list.status).toBe(0);
        expect(list.out).toMatch(/ESTABLISHED .*dst=10\.96\.0\.10 .*dport=80/);
        expect(kubetun(B, ['ct', 'list', '--node', 'node1', '--dst', '10.96.0.10']).out).toBe('');
        // Flushing B leaves A's flow; flushing A removes it.
        expect(kubetun(B, ['ct', 'flush', '--node', 'node1']).status).toBe(0);
        expect(ctCount(A, 'node1')).toBeGreaterThanOrEqual(1);
        dl.kill();
        await sleep(500);
        expect(kubetun(A, ['ct', 'flush', '--node', 'node1']).status).toBe(0);
        expect(ctCount(A, 'node1')).toBe(0);
      } finally {
        dl.kill();
      }
    },
    SLOW,
  );

  it(
    'svc list (text and --json) answers on every node of each lab',
    () => {
      for (const p of [A, B]) {
        for (const node of ['node1', 'node2']) {
          const text = kubetun(p, ['svc', 'list', '--node', node]);
          expect(text.status, text.err).toBe(0);
          expect(text.out).toContain('10.96.0.10:80');
          const json = kubetun(p, ['svc', 'list', '--node', node, '--json']);
          expect(json.status).toBe(0);
          expect(JSON.parse(json.out)).toBeTypeOf('object');
        }
      }
    },
    SLOW,
  );

  it(
    'lab status and lab exec see their own lab',
    () => {
      for (const p of [A, B]) {
        const s = kubetun(p, ['lab', 'status']);
        expect(s.status, `${s.err}${s.out}`).toBe(0); // status 1: unhealthy, its output says why
        expect(s.out).toContain(`${p}node1`);
        const other = p === A ? B : A;
        expect(s.out).not.toContain(`${other}node1`);
        const j = JSON.parse(kubetun(p, ['lab', 'status', '--json']).out) as { up: boolean };
        expect(j.up).toBe(true);
        const e = kubetun(p, ['lab', 'exec', 'pod-c', '--', 'cat', '/proc/self/net/dev']);
        expect(e.status).toBe(0);
        expect(e.out).toContain('eth0');
      }
    },
    SLOW,
  );

  it(
    'the curl-vs-ping demo runs in each lab and reads its own agent',
    () => {
      for (const p of [A, B]) {
        const d = kubetun(p, ['lab', 'demo', 'curl-vs-ping']);
        expect(d.status, d.err).toBe(0);
        expect(d.out).toMatch(/curl .*10\.96\.0\.10/);
      }
    },
    SLOW,
  );

  it(
    'lab down of A leaves B working; of B too, and nothing of either is left',
    () => {
      expect(kubetun(A, ['lab', 'down']).status).toBe(0);
      expect(netns(A)).toEqual([]);
      expect(existsSync(paths(A).labDir)).toBe(false);
      expect(existsSync(paths(A).ctlDir)).toBe(false);
      expect(kubetun(B, ['svc', 'list', '--node', 'node1']).status).toBe(0);
      const gone = kubetun(A, ['svc', 'list', '--node', 'node1']);
      expect(gone.status).toBe(2);
      expect(gone.err).toContain(paths(A).ctlDir);

      const down = kubetun(B, ['lab', 'down', '--keep-logs']);
      expect(down.status).toBe(0);
      expect(down.err).toContain(`logs kept in ${paths(B).labDir}/logs`);
      expect(netns(B)).toEqual([]);
      expect(existsSync(join(paths(B).labDir, 'logs'))).toBe(true);
      expect(existsSync(join(paths(B).labDir, 'state.json'))).toBe(false);
      expect(existsSync(paths(B).ctlDir)).toBe(false);
      expect(kubetun(B, ['lab', 'down']).status).toBe(0);
      expect(existsSync(paths(B).labDir)).toBe(false);
    },
    SLOW,
  );
});
