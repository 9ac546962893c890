// src/sh.ts's batches (root: `ip` and `tc` in a scratch namespace of their own): many commands
// in one process, the failures reported per command — the agent's steering installs and undoes
// its tc filters this way (src/node/steering.ts), one fork instead of one per filter.
import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB_PREFIX } from '../src/lab/prefix.ts';
import { CommandError, sh, shBatch, shBatchAsync } from '../src/sh.ts';

const NS = `${LAB_PREFIX}sh-${process.pid}`;
const IP = ['ip', '-n', NS];
const inNsIp = (...a: string[]) => [...IP, ...a];
const routes = () =>
  sh(inNsIp('-4', 'route', 'show'))
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);

beforeAll(() => {
  sh(['ip', 'netns', 'add', NS]);
  sh(inNsIp('link', 'add', 'd0', 'type', 'veth', 'peer', 'name', 'd1'));
  sh(inNsIp('link', 'set', 'd0', 'up'));
  sh(inNsIp('link', 'set', 'd1', 'up'));
});
afterAll(() => {
  sh(['ip', 'netns', 'del', NS]);
});

describe('shBatch', () => {
  it('runs every command in one batch', () => {
    shBatch(IP, [
      ['route', 'add', '10.1.0.0/24', 'dev', 'd0'],
      ['route', 'add', '10.2.0.0/24', 'dev', 'd0'],
      ['route', 'add', '10.3.0.0/24', 'dev', 'd0'],
    ]);
    expect(routes()).toEqual([
      '10.1.0.0/24 dev d0 scope link',
      '10.2.0.0/24 dev d0 scope link',
      '10.3.0.0/24 dev d0 scope link',
    ]);
  });

  it('without force: stops at the first failure and throws it, naming that command', () => {
    let err: unknown;
    try {
      shBatch(IP, [
        ['route', 'del', '10.1.0.0/24'],
        ['route', 'del', '10.9.0.0/24'], // not there
        ['route', 'del', '10.2.0.0/24'],
      ]);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CommandError);
    expect((err as CommandError).message).toMatch(/^ip -n \S+ route del 10\.9\.0\.0\/24: .+/);
    expect(routes()).toEqual(['10.2.0.0/24 dev d0 scope link', '10.3.0.0/24 dev d0 scope link']);
  });

  it('with force: runs them all and returns each failed command with its message', () => {
    const failed = shBatch(
      IP,
      [
        ['route', 'del', '10.8.0.0/24'], // not there
        ['route', 'del', '10.2.0.0/24'],
        ['route', 'del', '10.9.0.0/24'], // not there
        ['route', 'del', '10.3.0.0/24'],
      ],
      { force: true },
    );
    expect(failed).toHaveLength(2);
    expect(failed[0]).toMatch(/^ip -n \S+ route del 10\.8\.0\.0\/24: \S/);
    expect(failed[1]).toMatch(/^ip -n \S+ route del 10\.9\.0\.0\/24: \S/);
    expect(routes()).toEqual([]);
  });
});

describe('shBatchAsync', () => {
  it('a large batch of word lists and joined lines: every line runs, a failure is named by its own line', async () => {
    // 3,000 lines, written 1,024 at a time: the failure is in the third write
    const lines: (string | string[])[] = [];
    for (let i = 0; i < 3000; i++) {
      const net = `10.${100 + (i >> 8)}.${i & 255}.0/30`;
      lines.push(i % 2 ? `route add ${net} dev d0` : ['route', 'add', net, 'dev', 'd0']);
    }
    lines[2500] = 'route del 10.200.0.0/24'; // fails: not there
    try {
      const failed = await shBatchAsync(IP, lines);
      expect(failed).toHaveLength(1);
      expect(failed[0]).toMatch(/^ip -n \S+ route del 10\.200\.0\.0\/24: \S/);
      expect(routes()).toHaveLength(2999);
    } finally {
      shBatch(IP, [['route', 'flush', 'dev', 'd0']]);
    }
  });
});

// The agent runs in its node's namespace, so its undo steps are plain `tc …` / `ip …`: run
// UndoLog there, in a child of its own.
const UNWIND = `
  import cp from 'node:child_process';
  import { syncBuiltinESMExports } from 'node:module';
  const { sh } = await import(${JSON.stringify(new URL('../src/sh.ts', import.meta.url).href)});
  const { UndoLog } = await import(${JSON.stringify(new URL('../src/node/steering.ts', import.meta.url).href)});
  const undo = new UndoLog();
  sh(['tc', 'qdisc', 'add', 'dev', 'd0', 'clsact']);
  undo.add(['tc', 'qdisc', 'del', 'dev', 'd0', 'clsact']);
  for (const pref of ['7001', '7002']) {
    const f = ['dev', 'd0', 'ingress', 'pref', pref];
    sh(['tc', 'filter', 'add', ...f, 'protocol', 'ip', 'u32', 'match', 'u32', '0', '0']);
    undo.add(['tc', 'filter', 'del', ...f]);
  }
  undo.add(['tc', 'filter', 'del', 'dev', 'd0', 'ingress', 'pref', '7003']); // never added
  sh(['ip', 'route', 'add', '10.4.0.0/24', 'dev', 'd0']);
  undo.add(['ip', 'route', 'del', '10.4.0.0/24', 'dev', 'd0']);
  undo.add(['true']);
  // count the processes unwind starts (sh.ts's spawnSync is node:child_process's, patched here)
  const spawnSync = cp.spawnSync;
  let spawns = 0;
  cp.spawnSync = (...a) => (spawns++, spawnSync(...a));
  syncBuiltinESMExports();
  const failed = undo.unwind();
  console.log(JSON.stringify({ failed, left: undo.steps.length, spawns }));
`;

describe('UndoLog.unwind', () => {
  it('undoes last first, consecutive tc steps in one process, and reports only what failed', () => {
    const r = spawnSync(
      'ip',
      [
        'netns',
        'exec',
        NS,
        process.execPath,
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        UNWIND,
      ],
      { encoding: 'utf8', timeout: 60_000 },
    );
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { failed: string[]; left: number; spawns: number };
    const { failed, left } = out;
    expect(out.spawns, 'true, ip route del, one tc batch of four').toBe(3);
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatch(/^tc filter del dev d0 ingress pref 7003: \S/);
    expect(left).toBe(0);
    expect(routes()).toEqual([]);
    expect(sh(['tc', '-n', NS, 'qdisc', 'show', 'dev', 'd0'])).not.toMatch(/clsact/);
  });
});
