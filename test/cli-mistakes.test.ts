// Every user mistake ends in one or two lines naming what to fix and exit status 2, never a
// stack trace (a stack only with --debug). The table below is the newcomer's list (issue 17):
// each row is run through the real CLI and its stderr checked for the message and for the
// absence of a stack. No lab is brought up: the rows that need "no lab" use a prefix of their
// own that never has one; the non-root rows run as `nobody` (setpriv), so they need root to
// set up and are skipped without it.
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..');
const BASE = (process.env.KUBETUN_LAB_PREFIX || 'kt-').replace(/-+$/, '');
/**
 * A prefix no lab ever uses, so "no lab up" holds whatever else runs on the machine — one per
 * row: the rows run side by side, and two `lab up`s of one prefix contend for its lab lock
 * ("another lab command is running" instead of the mistake's message; CI saw it).
 */
const noLab = (row: number) => `${BASE}e${row}-`;
const isRoot = process.getuid?.() === 0;

const dir = mkdtempSync(join(tmpdir(), 'kubetun-mistakes-'));
chmodSync(dir, 0o755);
const nobodyTmp = join(dir, 'tmp');
mkdirSync(nobodyTmp);
chmodSync(nobodyTmp, 0o1777);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A copy of the lab's topology and manifests with one edit, to break one thing at a time. */
function labCopy(name: string, edit: (topology: string) => string, manifest?: string): string {
  const d = join(dir, name);
  mkdirSync(d, { recursive: true });
  cpSync(join(ROOT, 'lab/manifests'), join(d, 'manifests'), { recursive: true });
  const topo = spawnSync('cat', [join(ROOT, 'lab/topology.yaml')], { encoding: 'utf8' }).stdout;
  writeFileSync(join(d, 'topology.yaml'), edit(topo));
  if (manifest !== undefined) writeFileSync(join(d, 'manifests', 'zz-broken.yaml'), manifest);
  return join(d, 'topology.yaml');
}

const missingManifests = labCopy('no-manifests', (t) =>
  t.replace(/^manifests:.*$/m, 'manifests: does-not-exist'),
);
const topoTypo = labCopy('typo', (t) => t.replace(/podCidr:/, 'podCIDR:'));
const yamlSyntax = labCopy(
  'syntax',
  (t) => t,
  'apiVersion: v1\nkind: Service\nmetadata: { name: broken\nspec: [\n',
);
const topoSyntax = join(dir, 'bad-topology.yaml');
writeFileSync(topoSyntax, 'nodes:\n  - name: node1\n   ip: 1.2.3.4\n');

interface Mistake {
  what: string;
  args: string[];
  /** what the message must say (the thing to fix) */
  says: RegExp;
  asNobody?: boolean;
}

const MISTAKES: Mistake[] = [
  { what: 'unknown subcommand', args: ['frobnicate'], says: /unknown command 'frobnicate'/ },
  { what: 'unknown lab subcommand', args: ['lab', 'upp'], says: /unknown command 'upp'/ },
  { what: 'missing flag', args: ['replay', '--in', 'x.pcap'], says: /--manifests <path>/ },
  { what: 'unknown flag', args: ['svc', 'list', '--nod', 'node1'], says: /unknown option '--nod'/ },
  {
    what: 'bad flag value',
    args: ['ct', 'list', '--src', '10.244.1'],
    says: /--src: .*10\.244\.1/,
  },
  {
    what: 'bad --node',
    args: ['svc', 'list', '--node', '../x'],
    says: /--node: .* not a node name/,
  },
  { what: 'no lab up: svc list', args: ['svc', 'list', '--node', 'node1'], says: /no agent/ },
  { what: 'no lab up: ct list', args: ['ct', 'list', '--node', 'node1'], says: /no agent/ },
  { what: 'no lab up: lab exec', args: ['lab', 'exec', 'pod-a', '--', 'true'], says: /lab up/ },
  { what: 'unknown exec target', args: ['lab', 'exec', 'pod-z', '--', 'true'], says: /pod-z/ },
  { what: 'unknown demo', args: ['lab', 'demo', 'nope'], says: /unknown demo "nope"/ },
  { what: 'unknown scenario', args: ['lab', 'compare', 'nope'], says: /unknown scenario "nope"/ },
  { what: 'unknown mode', args: ['lab', 'mode', 'ipvs'], says: /unknown mode "ipvs"/ },
  { what: 'bad --mode', args: ['lab', 'up', '--mode', 'ipvs'], says: /--mode.*ipvs/ },
  {
    what: 'missing topology file',
    args: ['lab', 'up', '--topology', join(dir, 'nope.yaml')],
    says: /nope\.yaml: cannot read/,
  },
  {
    what: 'missing manifests directory: lab up',
    args: ['lab', 'up', '--topology', missingManifests],
    says: /does-not-exist/,
  },
  {
    what: 'missing manifests directory: lab status',
    args: ['lab', 'status', '--topology', missingManifests],
    says: /does-not-exist/,
  },
  {
    what: 'topology typo',
    args: ['lab', 'up', '--topology', topoTypo],
    says: /podCidr.*did you mean|podCIDR.*podCidr/,
  },
  {
    what: 'topology YAML syntax error',
    args: ['lab', 'status', '--topology', topoSyntax],
    says: /bad-topology\.yaml/,
  },
  {
    what: 'manifest syntax error: lab up',
    args: ['lab', 'up', '--topology', yamlSyntax],
    says: /zz-broken\.yaml/,
  },
  {
    what: 'manifest syntax error: lab status',
    args: ['lab', 'status', '--topology', yamlSyntax],
    says: /zz-broken\.yaml/,
  },
  {
    what: 'manifest syntax error: rules',
    args: ['rules', '--manifests', join(dir, 'syntax', 'manifests')],
    says: /zz-broken\.yaml/,
  },
  { what: 'non-root: lab up', args: ['lab', 'up'], says: /needs root/, asNobody: true },
  { what: 'non-root: lab down', args: ['lab', 'down'], says: /needs root/, asNobody: true },
  {
    what: 'non-root: lab exec',
    args: ['lab', 'exec', 'pod-a', '--', 'true'],
    says: /needs root/,
    asNobody: true,
  },
  {
    what: 'non-root: ct list',
    args: ['ct', 'list', '--node', 'node1'],
    says: /root|no agent/,
    asNobody: true,
  },
];

/** The CLI with this argv, asynchronously, so the rows run side by side (each starts tsx). */
function kubetun(
  args: string[],
  row: number,
  asNobody = false,
): Promise<{ err: string; status: number }> {
  const env: NodeJS.ProcessEnv = { ...process.env, KUBETUN_LAB_PREFIX: noLab(row) };
  delete env.KUBETUN_DEBUG;
  const argv = [process.execPath, join(ROOT, 'bin/kubetun.mjs'), ...args];
  const cmd = asNobody
    ? ['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups', ...argv]
    : argv;
  // tsx keeps a cache under the temp directory per user; nobody gets one it may write.
  if (asNobody) env.TMPDIR = nobodyTmp;
  return new Promise((done) => {
    const p = spawn(cmd[0]!, cmd.slice(1), { env, cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.setEncoding('utf8').on('data', (d: string) => {
      err += d;
    });
    p.on('close', (status) => done({ err, status: status ?? -1 }));
  });
}

/** A V8 stack frame ("    at fn (file.ts:12:3)") anywhere in the text. */
const STACK = /^\s+at .+(:\d+:\d+\)?|\(native\))$/m;

/** Each row starts a node process; on a loaded machine that alone takes seconds. */
const SLOW = 180_000;

describe.concurrent('every user mistake: one or two lines, exit status 2, no stack', () => {
  for (const [row, m] of MISTAKES.entries()) {
    it.skipIf(m.asNobody === true && !isRoot)(m.what, { timeout: SLOW }, async () => {
      const r = await kubetun(m.args, row, m.asNobody);
      const lines = r.err.split('\n').filter((l) => l.trim() !== '');
      expect(r.err).not.toMatch(STACK);
      expect(r.err).toMatch(m.says);
      expect(lines.length, r.err).toBeGreaterThanOrEqual(1);
      expect(lines.length, r.err).toBeLessThanOrEqual(2);
      expect(r.status, r.err).toBe(2);
    });
  }

  it('--debug adds the stack to the same message', { timeout: SLOW }, async () => {
    const r = await kubetun(
      ['lab', 'status', '--topology', missingManifests, '--debug'],
      MISTAKES.length,
    );
    expect(r.status).toBe(2);
    expect(r.err).toMatch(/does-not-exist/);
    expect(r.err).toMatch(STACK);
  });
});
