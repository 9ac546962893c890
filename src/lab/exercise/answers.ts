// Answers the lab decides when `check` runs, because they depend on what the traffic did: which
// KUBE-SEP chain a flow took is a random draw made when its SYN went through KUBE-SVC.
import { inNs, shAsync } from '../../sh.ts';
import type { Topology } from '../topology.ts';
import { nsOf } from './actions.ts';
import type { AcceptFrom } from './spec.ts';

/**
 * The KUBE-SEP chains whose DNAT target is the backend of one of the node's ESTABLISHED
 * conntrack entries for src -> dst:dport (one per open connection: a pool that reconnected has a
 * new one, and an entry of a connection torn down without a FIN lingers); [] when there is no
 * such flow; {error} when the tools fail.
 */
export async function decideAnswer(
  f: AcceptFrom,
  t: Topology,
): Promise<string[] | { error: string }> {
  const ns = nsOf(t, f.node);
  const ct = await shAsync(
    inNs(ns, [
      'conntrack',
      '-L',
      '-p',
      'tcp',
      '--orig-src',
      f.src,
      '--orig-dst',
      f.dst,
      '--dport',
      String(f.dport),
      '--state',
      'ESTABLISHED',
    ]),
  );
  const backends = flowBackends(ct.out, f.src);
  if (backends.length === 0) return [];
  const rules = await shAsync(inNs(ns, ['iptables-save', '-t', 'nat']));
  if (rules.status !== 0) return { error: `iptables-save on ${f.node}: ${rules.err.trim()}` };
  const seps = backends.flatMap((b) => sepFor(rules.out, f.dst, f.dport, b) ?? []);
  return seps.length
    ? seps
    : {
        error: `no KUBE-SEP chain of ${f.dst}:${f.dport} on ${f.node} DNATs to ${backends.join(' or ')}`,
      };
}

/** In `conntrack -L` lines of flows from `src`: each reply tuple's src:sport (the backend), once. */
export function flowBackends(conntrackOut: string, src: string): string[] {
  // original tuple first, reply tuple second: the reply's src/sport is the backend.
  const re = new RegExp(`src=([0-9.]+) dst=${src.replace(/\./g, '\\.')} sport=(\\d+)`, 'g');
  return [...new Set([...conntrackOut.matchAll(re)].map((m) => `${m[1]}:${m[2]}`))];
}

/**
 * In iptables-save text: KUBE-SERVICES' jump for dst:dport names the KUBE-SVC chain, which jumps
 * to one KUBE-SEP per endpoint; the one whose DNAT goes to `backend` (ip:port). Other Services
 * with the same endpoint have their own SEP chains, hence the walk from the VIP down.
 */
export function sepFor(
  save: string,
  dst: string,
  dport: number,
  backend: string,
): string | undefined {
  const lines = save.split('\n');
  const svc = lines
    .find(
      (l) =>
        l.startsWith('-A KUBE-SERVICES ') &&
        // iptables-save prints -d 10.96.0.10/32; kube-proxy's restore input has no /32
        (l.includes(`-d ${dst}/32 `) || l.includes(`-d ${dst} `)) &&
        l.includes(`--dport ${dport} `),
    )
    ?.match(/-j (KUBE-SVC-\w+)/)?.[1];
  if (!svc) return undefined;
  const seps = lines
    .filter((l) => l.startsWith(`-A ${svc} `))
    .map((l) => l.match(/-j (KUBE-SEP-\w+)/)?.[1])
    .filter((x): x is string => x !== undefined);
  return seps.find((sep) =>
    lines.some((l) => l.startsWith(`-A ${sep} `) && l.includes(`--to-destination ${backend}`)),
  );
}
