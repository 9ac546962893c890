// What `exercise check` judges. Two kinds of evidence, as a reviewer of a real fix would want:
// the lab's state (an agent's flags, its conntrack headroom, a Service field) and behaviour —
// traffic sent from every pod, through the Service, right now. Each check yields one line that
// says what holds or what does not yet, with what was seen.
import { join } from 'node:path';
import { inNs, nsNode, shAsync } from '../../sh.ts';
import { allPods, type Topology } from '../topology.ts';
import { nsOf } from './actions.ts';
import { checkEndpoints, checkObject, checkRollout, checkService } from './cluster-checks.ts';
import { checkDnsConfig, checkDnsLookup } from './dns-checks.ts';
import type { CheckItem } from './item.ts';
import type { ExerciseLab, LabNow } from './labs.ts';
import type { Check } from './spec.ts';

export type { CheckItem } from './item.ts';

/** "pods" = every pod; "pods@node1" = that node's pods; anything else is a lab target name. */
export function expandFrom(t: Topology, from: string[]): string[] {
  return from.flatMap((f) => {
    if (f === 'pods') return allPods(t).map((p) => p.name);
    const m = /^pods@(.+)$/.exec(f);
    if (m)
      return allPods(t)
        .filter((p) => p.node === m[1])
        .map((p) => p.name);
    return [f];
  });
}

export interface CheckContext {
  t: Topology;
  lab: ExerciseLab;
  now: LabNow;
  /** counters read before the behaviour checks (counter-still) */
  before: Map<string, number>;
}

async function httpFrom(t: Topology, who: string, url: string, times: number) {
  const backends = new Set<string>();
  const fails: string[] = [];
  for (let i = 0; i < times; i++) {
    const argv = ['curl', '-sS', '-m', '3', '-o', '-', '-w', '\n%{http_code}', url];
    // the kill is a backstop for a hung client (curl's own -m bounds it): generous, as a VM
    // lab reaches its pods through ssh
    const r = await shAsync(inNs(nsOf(t, who), argv), 60_000);
    const lines = r.out.trimEnd().split('\n');
    const code = lines.pop();
    if (r.status === 0 && code === '200') backends.add((lines[0] ?? '').split(' ')[0] ?? '?');
    else fails.push(r.err.trim().split('\n').pop() || `HTTP ${code}`);
  }
  return { backends, fails };
}

async function checkHttp(c: Extract<Check, { kind: 'http' }>, x: CheckContext): Promise<CheckItem> {
  const who = expandFrom(x.t, c.from);
  const res = await Promise.all(who.map((w) => httpFrom(x.t, w, c.url, c.times)));
  const bad = who.filter((_, i) => res[i]!.fails.length > 0);
  const parts = who.map((w, i) => {
    const r = res[i]!;
    const n = c.times - r.fails.length;
    return `${w} ${n}/${c.times}${r.fails.length ? ` (${r.fails[0]})` : ` -> ${[...r.backends].join(',')}`}`;
  });
  let ok = bad.length === 0;
  let detail = parts.join('; ');
  // minBackends is per client: affinity pins each client to one backend, all clients together
  // may still reach several.
  const narrow = who.filter((_, i) => res[i]!.backends.size < c.minBackends);
  if (ok && narrow.length > 0) {
    ok = false;
    detail += `; ${narrow.join(', ')} reached fewer than ${c.minBackends} backends`;
  }
  return { title: c.title, ok, detail };
}

async function checkUdp(c: Extract<Check, { kind: 'udp' }>, x: CheckContext): Promise<CheckItem> {
  const who = expandFrom(x.t, c.from);
  // run where the pods are: the Node and the repository there
  const udpq = join(x.lab.repo, 'lab/servers/udpq.mjs');
  const argv = [nsNode(), udpq, c.ip, String(c.port), String(c.times), '1500'];
  const res = await Promise.all(who.map((w) => shAsync(inNs(nsOf(x.t, w), argv), 60_000)));
  const parts = who.map((w, i) => {
    const lines = res[i]!.out.trim().split('\n');
    const n = lines.filter((l) => l && l !== 'timeout').length;
    return `${w} ${n}/${c.times}`;
  });
  return { title: c.title, ok: res.every((r) => r.status === 0), detail: parts.join('; ') };
}

async function checkPing(c: Extract<Check, { kind: 'ping' }>, x: CheckContext): Promise<CheckItem> {
  const who = expandFrom(x.t, c.from);
  const res = await Promise.all(
    who.map((w) =>
      shAsync(inNs(nsOf(x.t, w), ['ping', '-n', '-c', '2', '-i', '0.2', '-W', '1', c.ip]), 60_000),
    ),
  );
  const got = res.map((r) => r.status === 0);
  const want = c.expect === 'reply';
  const parts = who.map((w, i) => `${w}: ${got[i] ? 'reply' : 'no reply'}`);
  return { title: c.title, ok: got.every((g) => g === want), detail: parts.join('; ') };
}

async function ctOf(
  x: CheckContext,
  node: string,
): Promise<{ count: number; max: number } | string> {
  try {
    return await x.lab.agentCtl<{ count: number; max: number }>(node, { cmd: 'ct-count' });
  } catch (err) {
    return (err as Error).message;
  }
}

export async function counterOf(lab: ExerciseLab, node: string, reason: string) {
  try {
    const r = await lab.agentCtl<{ counters: Record<string, number> }>(node, { cmd: 'counters' });
    return r.counters[reason];
  } catch {
    return undefined;
  }
}

export async function runCheck(c: Check, x: CheckContext): Promise<CheckItem> {
  switch (c.kind) {
    case 'http':
      return checkHttp(c, x);
    case 'udp':
      return checkUdp(c, x);
    case 'ping':
      return checkPing(c, x);
    case 'ct-headroom': {
      const r = await ctOf(x, c.node);
      if (typeof r === 'string') return { title: c.title, ok: false, detail: r };
      const free = r.max - r.count;
      return {
        title: c.title,
        ok: free >= c.atLeast,
        detail: `${r.count} of ${r.max} entries in use, ${free} free`,
      };
    }
    case 'counter-still': {
      const now = await counterOf(x.lab, c.node, c.reason);
      const was = x.before.get(`${c.node}/${c.reason}`);
      if (now === undefined || was === undefined)
        return {
          title: c.title,
          ok: false,
          detail: `no ${c.reason} counter from kubetun on ${c.node}`,
        };
      return {
        title: c.title,
        ok: now === was,
        detail: `${c.reason} on ${c.node}: ${was} -> ${now} while the traffic checks ran`,
      };
    }
    case 'agent-flag': {
      const flags = x.now.agents[c.node]?.flags ?? [];
      const has = flags.includes(c.flag);
      return {
        title: c.title,
        ok: has === c.present,
        detail: `kubetun on ${c.node} runs with ${flags.length ? flags.join(' ') : 'no extra flags'}`,
      };
    }
    case 'workload-log': {
      const w = x.lab.workload(c.name);
      const lines = w ? w.log.trimEnd().split('\n').slice(-c.last) : [];
      const re = new RegExp(c.match);
      const ok = lines.length === c.last && lines.every((l) => re.test(l));
      return {
        title: c.title,
        ok,
        detail: w ? `${c.name}'s last lines: ${lines.join(' | ')}` : `${c.name} is not running`,
      };
    }
    case 'workload': {
      const w = x.lab.workload(c.name);
      const alive = w?.alive === true;
      return {
        title: c.title,
        ok: alive,
        detail: alive
          ? `${c.name} runs in ${w.ns} (pid ${w.pid})`
          : `${c.name} is not running: it is part of the application, not the fault`,
      };
    }
    case 'service':
      return checkService(c);
    case 'object':
      return checkObject(c);
    case 'endpoints':
      return checkEndpoints(c);
    case 'rollout':
      return checkRollout(c, x.t, expandFrom(x.t, c.from));
    case 'dns-config':
      return checkDnsConfig(c);
    case 'dns-lookup':
      return checkDnsLookup(c);
  }
}
