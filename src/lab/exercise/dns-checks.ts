// The checks of a Deployment's name resolution, as its Pods do it: the name the app is configured
// with (an env var of the Pod template), looked up with the Pod's own resolv.conf — the one the
// kubelet wrote from dnsPolicy and dnsConfig.
//
//   dns-config   state: for every Pod, will the resolver try the name as it is first? It does
//                when the name ends in a dot (absolute) or has at least ndots dots; otherwise
//                it walks the search list first, one query per domain.
//   dns-lookup   behaviour: `getent ahostsv4 NAME` in every Pod answers, and the cluster DNS
//                (whose Pods log each query, --log) saw at most `atMost` queries from that Pod
//                for it; the detail gives the names asked, in order, and how long it took.
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { NETNS_ETC, parseResolvConf } from '../../cluster/dns/resolv-conf.ts';
import { sandboxNames } from '../../cluster/kubelet.ts';
import { matchesSelector } from '../../cluster/selector.ts';
import type { Deployment, Pod, Service } from '../../cluster/types.ts';
import { podLogFile } from '../control-plane.ts';
import { inNs, shAsync } from '../../sh.ts';
import { getObject, isPodReady, listObjects } from './cluster.ts';
import type { CheckItem } from './item.ts';
import type { Check } from './spec.ts';

type C<K extends Check['kind']> = Extract<Check, { kind: K }>;

interface AppPods {
  pods: Pod[];
  /** the name the app resolves: the env var's value in the Deployment's template */
  name?: string;
  problem?: string;
}

async function appPods(deployment: string, env: string): Promise<AppPods> {
  const { object: d, ns, name } = await getObject<Deployment>(deployment, 'Deployment');
  if (!d) return { pods: [], problem: `no Deployment ${ns}/${name}` };
  const vars = d.spec.template.spec.containers.flatMap(
    (c) => (c.env as { name: string; value?: string }[] | undefined) ?? [],
  );
  const value = vars.find((v) => v.name === env)?.value;
  if (!value) return { pods: [], problem: `Deployment ${ns}/${name} sets no ${env}` };
  const pods = (await listObjects<Pod>('Pod', ns)).filter(
    (p) =>
      !p.metadata.deletionTimestamp && matchesSelector(p.metadata.labels ?? {}, d.spec.selector),
  );
  if (pods.length === 0) return { pods, name: value, problem: `no Pod of ${ns}/${name} runs` };
  return { pods, name: value };
}

function podNdots(p: Pod): { ndots: number; searches: string[] } | undefined {
  try {
    const conf = readFileSync(join(NETNS_ETC, sandboxNames(p).ns, 'resolv.conf'), 'utf8');
    const c = parseResolvConf(conf);
    const v = c.options.find((o) => o.name === 'ndots')?.value;
    return { ndots: v === undefined ? 1 : Number(v), searches: c.searches };
  } catch {
    return undefined;
  }
}

/** glibc's rule (resolv.conf(5)): tried as is first when absolute or with >= ndots dots. */
export function triedAsIsFirst(name: string, ndots: number): boolean {
  return name.endsWith('.') || (name.match(/\./g) ?? []).length >= ndots;
}

export async function checkDnsConfig(c: C<'dns-config'>): Promise<CheckItem> {
  const a = await appPods(c.deployment, c.env);
  if (a.problem) return { title: c.title, ok: false, detail: a.problem };
  const parts: string[] = [];
  let ok = true;
  for (const p of a.pods) {
    const r = podNdots(p);
    const first = r !== undefined && triedAsIsFirst(a.name!, r.ndots);
    ok &&= first;
    parts.push(
      r === undefined
        ? `${p.metadata.name}: no resolv.conf yet`
        : `${p.metadata.name}: ndots:${r.ndots}, ${a.name} is ${first ? 'asked as is first' : `asked with ${r.searches.length} search domains first`}`,
    );
  }
  return { title: c.title, ok, detail: parts.join('; ') };
}

/** The cluster DNS Pods: those kube-system/kube-dns selects. */
async function dnsPods(): Promise<Pod[]> {
  const { object: svc } = await getObject<Service>('kube-system/kube-dns', 'Service');
  const sel = svc?.spec.selector ?? {};
  return (await listObjects<Pod>('Pod', 'kube-system')).filter((p) =>
    matchesSelector(p.metadata.labels ?? {}, sel),
  );
}

const sizeOf = (f: string) => {
  try {
    return statSync(f).size;
  } catch {
    return 0;
  }
};

/** The query-log lines ("client transport name type rcode=N") written after `from` bytes. */
function logSince(file: string, from: number): string[] {
  try {
    return readFileSync(file).subarray(from).toString('utf8').split('\n');
  } catch {
    return [];
  }
}

async function lookupFrom(p: Pod, name: string, dns: Pod[]) {
  const logs = dns.map((d) => podLogFile(d));
  const from = logs.map(sizeOf);
  const t0 = performance.now();
  const r = await shAsync(inNs(sandboxNames(p).ns, ['getent', 'ahostsv4', name]), 20_000);
  const ms = Math.round(performance.now() - t0);
  await sleep(100); // the server logs a query just before it sends the answer
  const bare = name.toLowerCase().replace(/\.$/, '');
  const ip = p.status?.podIP ?? '';
  const asked: string[] = [];
  logs.forEach((f, i) => {
    for (const line of logSince(f, from[i]!)) {
      const [client, , q, type] = line.split(' ');
      const qn = (q ?? '').toLowerCase().replace(/\.$/, '');
      if (client === ip && type === 'A' && (qn === bare || qn.startsWith(`${bare}.`)))
        if (!asked.includes(qn)) asked.push(qn);
    }
  });
  const addr = r.out.trim().split(/\s+/)[0] ?? '';
  return { ok: r.status === 0, addr, ms, asked };
}

export async function checkDnsLookup(c: C<'dns-lookup'>): Promise<CheckItem> {
  const a = await appPods(c.deployment, c.env);
  if (a.problem) return { title: c.title, ok: false, detail: a.problem };
  const dns = await dnsPods();
  let ok = true;
  const parts: string[] = [];
  for (const p of a.pods.filter(isPodReady)) {
    const r = await lookupFrom(p, a.name!, dns);
    const n = r.asked.length;
    const good = r.ok && n >= 1 && n <= c.atMost;
    ok &&= good;
    const what = r.ok ? `${a.name} -> ${r.addr} in ${r.ms} ms` : `${a.name} did not resolve`;
    const seen =
      n === 0
        ? 'the cluster DNS logged no query from it (does the Pod ask kube-dns?)'
        : `${n} ${n === 1 ? 'query' : 'queries'} at the cluster DNS: ${r.asked.join(', ')}`;
    parts.push(`${p.metadata.name}: ${what}, ${seen}`);
  }
  if (parts.length === 0) return { title: c.title, ok: false, detail: 'no Pod is ready' };
  return { title: c.title, ok, detail: parts.join('; ') };
}
