// kube-proxy's stale UDP conntrack cleanup for the lab's kernel modes. kube-proxy runs it at the
// end of a sync whose endpoint changes touched a service with a UDP port
// (endpointUpdateResult.ConntrackCleanupRequired → conntrack.CleanStaleEntries): it lists the
// node's UDP conntrack entries and deletes every one whose original destination is a UDP
// frontend and whose reply source is not a serving endpoint — the rule itself is shared with
// kubetun's reconciler (src/control/conntrack-reconcile.ts, udpFrontends / staleUdpFlow).
// Without it a UDP client that keeps its source port (a resolver, a game, a metrics agent)
// keeps sending into the old backend after it left the Service.
//
// Here, per node namespace: `conntrack -L -p udp`, then one
// `conntrack -D -p udp --orig-dst IP --orig-port-dst PORT --reply-src ENDPOINT` per stale entry.
// A dual-stack topology runs it for IPv6 too (`-f ipv6`), as kube-proxy's IPv6 proxier does for
// its own Services and IPv6 endpoints.
import { staleUdpFlow, udpFrontends, type UdpFrontends } from '../control/conntrack-reconcile.ts';
import type { IPFamily, ResolvedServicePort } from '../model.ts';
import { inNs, shTry } from '../sh.ts';
import { canonIpv6 } from '../wire/addr6.ts';
import type { Topology } from './topology.ts';

/** `conntrack`'s family option: none for IPv4 (its default), `-f ipv6`. */
function familyArgs(family: IPFamily): string[] {
  return family === 'IPv6' ? ['-f', 'ipv6'] : [];
}

/** One UDP entry as `conntrack -L` prints it: the original tuple first, then the reply tuple. */
export interface UdpEntry {
  origDst: string;
  origDport: number;
  replySrc: string;
}

/**
 * The UDP entries of `conntrack -L -p udp` text (`-f ipv6`: addresses in canonical text, as the
 * frontends have them); lines it cannot read are skipped.
 */
export function parseUdpEntries(text: string): UdpEntry[] {
  const out: UdpEntry[] = [];
  const canon = (a: string) => (a.includes(':') ? (canonIpv6(a) ?? a) : a);
  for (const line of text.split('\n')) {
    if (!/^udp\s/.test(line)) continue;
    const src = [...line.matchAll(/\bsrc=(\S+)/g)].map((m) => canon(m[1]!));
    const dst = [...line.matchAll(/\bdst=(\S+)/g)].map((m) => canon(m[1]!));
    const dport = [...line.matchAll(/\bdport=(\d+)/g)].map((m) => Number(m[1]));
    if (src.length < 2 || dst.length < 1 || dport.length < 1) continue;
    out.push({ origDst: dst[0]!, origDport: dport[0]!, replySrc: src[1]! });
  }
  return out;
}

/**
 * The `conntrack -D` argument lists that delete the stale entries, one per stale (original
 * destination, port, reply source), deduplicated. kube-proxy's NodePort filter leaves the
 * destination out; naming it deletes the same entries (the node address is the destination).
 */
export function staleUdpDeletes(
  f: UdpFrontends,
  entries: readonly UdpEntry[],
  family: IPFamily = 'IPv4',
): string[][] {
  const out = new Map<string, string[]>();
  for (const { origDst, origDport, replySrc } of entries) {
    if (!staleUdpFlow(f, origDst, origDport, replySrc)) continue;
    const argv = ['conntrack', '-D', ...familyArgs(family), '-p', 'udp', '--orig-dst', origDst];
    argv.push('--orig-port-dst', String(origDport), '--reply-src', replySrc);
    out.set(argv.join(' '), argv);
  }
  return [...out.values()];
}

/**
 * What decides whether a sync needs the cleanup: the endpoints of every service port of a service
 * that has a UDP port (kube-proxy: any endpoint change of such a service), of every family given.
 */
export function udpEndpointsSignature(...families: (readonly ResolvedServicePort[])[]): string {
  const sig = families.map((ports) => {
    const udpServices = new Set(
      ports
        .filter((p) => p.port.protocol === 'UDP')
        .map((p) => p.service.namespace + '/' + p.service.name),
    );
    return ports
      .filter((p) => udpServices.has(p.service.namespace + '/' + p.service.name))
      .map((p) => [p.servicePortName, p.port.protocol, p.endpoints]);
  });
  return JSON.stringify(sig);
}

/** The UDP frontends of one family's resolved ports (`endpoints`: that family's endpoints). */
export function familyUdpFrontends(
  ports: readonly ResolvedServicePort[],
  family: IPFamily,
): UdpFrontends {
  if (family === 'IPv4') return udpFrontends(ports);
  // the shared rule reads an IPv6 port's endpoints from endpoints6, as a dual-stack port has them
  return udpFrontends(
    ports.map((p) => ({ ...p, endpoints6: p.endpoints })),
    'IPv6',
  );
}

/**
 * Deletes every node's stale UDP entries of one family for these service ports (as that family
 * resolves them: `endpoints` are its endpoints); returns how many it deleted.
 */
export function cleanStaleUdpConntrack(
  t: Topology,
  ports: readonly ResolvedServicePort[],
  family: IPFamily = 'IPv4',
): number {
  const f = familyUdpFrontends(ports, family);
  let deleted = 0;
  for (const n of t.nodes) {
    const list = ['conntrack', '-L', ...familyArgs(family), '-p', 'udp'];
    const listed = shTry(inNs(n.ns, list), 10_000);
    if (!listed.ok) continue;
    // `conntrack -D` exits 1 when the entry already went (timed out): not an error
    for (const argv of staleUdpDeletes(f, parseUdpEntries(listed.out), family))
      if (shTry(inNs(n.ns, argv), 10_000).ok) deleted++;
  }
  return deleted;
}
