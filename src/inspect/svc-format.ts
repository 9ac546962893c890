// `kubetun svc list` text in the layout of `ipvsadm -Ln` (ipvsadm's print_service_entry with
// numeric output), so kubetun's table reads like a kube-proxy IPVS node's:
//
//   IP Virtual Server version 1.2.1 (size=4096)
//   Prot LocalAddress:Port Scheduler Flags
//     -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
//   TCP  10.96.0.10:80 random
//     -> 10.244.1.2:8080              Masq    1      0          0
//
// Destination columns are printf("%-28s %-7s %-6d %-10u %-10u") as in ipvsadm, trailing
// padding included. ClientIP affinity prints as IPVS persistence ("persistent 10800"), as
// kube-proxy's IPVS mode programs it. kubetun always rewrites addresses: forward is "Masq".
// One column ipvsadm lacks, as `cilium service list` has it: the Service (ServicePortName)
// each frontend belongs to, aligned after the flags; the external-scope entry of an
// externalTrafficPolicy: Local service says "(local endpoints)" after its name.
import type { SvcEntry, SvcReport } from './types.ts';

export const IPVS_HEADER = [
  'Prot LocalAddress:Port Scheduler Flags',
  '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn',
];

export function formatSvcLine(s: SvcEntry): string {
  let line = `${s.proto}  ${s.vip}:${s.port} ${s.scheduler}`;
  if (s.flags.includes('affinity')) line += ` persistent ${s.affinityTimeoutSec}`;
  return line;
}

export function formatSvcBackends(s: SvcEntry): string[] {
  return s.backends.map(
    (b) =>
      `  -> ${`${b.addr}:${b.port}`.padEnd(28)} ${'Masq'.padEnd(7)} ${String(b.weight).padEnd(6)} ` +
      `${String(b.active).padEnd(10)} ${String(b.inactive).padEnd(10)}`,
  );
}

/** The whole table, one string per line (no newlines). */
export function formatSvcReport(r: SvcReport): string[] {
  const heads = r.services.map(formatSvcLine);
  const width = Math.max(IPVS_HEADER[0]!.length, ...heads.map((h) => h.length)) + 2;
  const out = [
    `IP Virtual Server version 1.2.1 (size=${r.connTableSize})`,
    `${IPVS_HEADER[0]!.padEnd(width)}Service`,
    IPVS_HEADER[1]!,
  ];
  r.services.forEach((s, i) => {
    const scope = s.flags.includes('local-scope') ? ' (local endpoints)' : '';
    const name = s.name === undefined ? '' : `${s.name}${scope}`;
    out.push(name ? `${heads[i]!.padEnd(width)}${name}` : heads[i]!, ...formatSvcBackends(s));
  });
  return out;
}
