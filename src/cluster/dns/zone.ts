// The cluster zone: every record the Kubernetes DNS specification (kubernetes/dns
// docs/specification.md, schema 1.1.0) asks for, built once per view, and the lookup that answers
// one question from it. Pure: no sockets, no clock.
//
//   <svc>.<ns>.svc.<zone>                 A/AAAA  ClusterIP(s)              (spec 2.3.1)
//   _<port>._<proto>.<svc>.<ns>.svc.<zone> SRV    0 100 <port> <svc>...     (2.3.2, named ports)
//   <d>.<c>.<b>.<a>.in-addr.arpa          PTR     <svc>.<ns>.svc.<zone>     (2.3.3)
//   headless: <svc>.<ns>.svc.<zone>       A/AAAA  each published endpoint   (2.4.1)
//             <host>.<svc>.<ns>.svc.<zone> A/AAAA that endpoint's address
//             _<port>._<proto>.<svc>...   SRV     one per endpoint × port   (2.4.2)
//             reverse of each endpoint    PTR     <host>.<svc>.<ns>.svc     (2.4.3)
//   ExternalName: <svc>.<ns>.svc.<zone>   CNAME   spec.externalName         (2.5)
//   <a>-<b>-<c>-<d>.<ns>.pod.<zone>       A       a.b.c.d                   (2.6, deprecated)
//   dns-version.<zone>                    TXT     the schema version        (2.2)
//   <zone>                                SOA, NS ns.dns.<zone> (A: the kube-dns ClusterIPs)
//
// Behaviour details follow CoreDNS's kubernetes plugin: an endpoint is published when its
// `ready` condition is not false or its Service has publishNotReadyAddresses; <host> is the
// endpoint's hostname, else its address with dashes (10-244-1-2); a headless Service with no
// published endpoint has no names at all (NXDOMAIN, as spec 2.4.1 says); an existing name asked
// for another type is NODATA; names between the zone and a record (`default.svc.<zone>`) exist
// (RFC 8020 empty non-terminals), as do the namespaces of Namespace objects and Services.
// A reverse name the cluster does not know is "outside": CoreDNS's default Corefile falls
// through to `forward` for in-addr.arpa, and so does the server here.
import type { Answer } from 'dns-packet';
import { isIPv4, isIPv6 } from 'node:net';
import type { DnsService, DnsServicePort, DnsSlice, View } from './view.ts';

/** CoreDNS's DNSSchemaVersion: the spec version its kubernetes plugin implements. */
export const DNS_SCHEMA_VERSION = '1.1.0';
/** CoreDNS's kubernetes plugin default TTL (seconds); also the SOA minimum (negative TTL). */
export const DEFAULT_TTL = 5;

export interface Zone {
  domain: string;
  ttl: number;
  records: Map<string, Answer[]>;
  /** Every name that exists: owners of records and their ancestors down to the domain. */
  names: Set<string>;
  soa: Answer;
}

export type LookupStatus = 'answer' | 'nodata' | 'nxdomain' | 'outside';

export interface Lookup {
  status: LookupStatus;
  answers: Answer[];
  additionals: Answer[];
}

export function buildZone(view: View, domain: string, ttl = DEFAULT_TTL): Zone {
  const d = domain.replace(/\.$/, '').toLowerCase();
  const z: Zone = { domain: d, ttl, records: new Map(), names: new Set(), soa: soaRecord(d, ttl) };
  add(z, z.soa);
  add(z, { type: 'NS', name: d, ttl, data: `ns.dns.${d}` });
  add(z, { type: 'TXT', name: `dns-version.${d}`, ttl, data: DNS_SCHEMA_VERSION });
  addName(z, `svc.${d}`);
  addName(z, `pod.${d}`);
  for (const ns of view.namespaces) addName(z, `${ns}.svc.${d}`);
  for (const svc of view.services) {
    addName(z, `${svc.namespace}.svc.${d}`);
    const slices = view.slices.filter(
      (s) => s.namespace === svc.namespace && s.service === svc.name,
    );
    if (svc.type === 'ExternalName') addExternalName(z, svc);
    else if (svc.headless) addHeadless(z, svc, slices);
    else if (svc.clusterIPs.length > 0) addClusterIP(z, svc);
    // else: a Service whose ClusterIP is not allocated yet has no name, as before admission.
    if (svc.namespace === 'kube-system' && svc.name === 'kube-dns')
      for (const ip of svc.clusterIPs) add(z, addressRecord(`ns.dns.${d}`, ip, ttl));
  }
  spreadSrvWeights(z);
  return z;
}

function soaRecord(d: string, ttl: number): Answer {
  // CoreDNS's SOA for the cluster zone: refresh 2h, retry 30m, expire 1d, minimum = TTL.
  const data = {
    mname: `ns.dns.${d}`,
    rname: `hostmaster.${d}`,
    serial: 1,
    refresh: 7200,
    retry: 1800,
    expire: 86400,
    minimum: ttl,
  };
  return { type: 'SOA', name: d, ttl, data };
}

export function serviceName(z: Zone, svc: Pick<DnsService, 'name' | 'namespace'>): string {
  return `${svc.name}.${svc.namespace}.svc.${z.domain}`;
}

function addClusterIP(z: Zone, svc: DnsService): void {
  const fqdn = serviceName(z, svc);
  for (const ip of svc.clusterIPs) {
    add(z, addressRecord(fqdn, ip, z.ttl));
    addPtr(z, ip, fqdn);
  }
  for (const p of svc.ports) addSrv(z, fqdn, p, p.port, fqdn);
}

function addHeadless(z: Zone, svc: DnsService, slices: DnsSlice[]): void {
  const fqdn = serviceName(z, svc);
  const seen = new Set<string>();
  for (const slice of slices) {
    if (slice.addressType !== 'IPv4' && slice.addressType !== 'IPv6') continue; // FQDN: no records
    for (const ep of slice.endpoints) {
      if (!ep.ready && !svc.publishNotReadyAddresses) continue;
      for (const ip of ep.addresses) {
        const host = `${ep.hostname ?? ip.replace(/[.:]/g, '-')}.${fqdn}`;
        if (!seen.has(ip)) add(z, addressRecord(fqdn, ip, z.ttl));
        if (!seen.has(`${host} ${ip}`)) add(z, addressRecord(host, ip, z.ttl));
        if (!seen.has(ip)) addPtr(z, ip, host);
        seen.add(ip).add(`${host} ${ip}`);
        for (const p of slice.ports) addSrv(z, fqdn, p, p.port, host);
      }
    }
  }
}

function addExternalName(z: Zone, svc: DnsService): void {
  add(z, { type: 'CNAME', name: serviceName(z, svc), ttl: z.ttl, data: svc.externalName! });
}

function addSrv(z: Zone, fqdn: string, p: DnsServicePort, port: number, target: string): void {
  if (p.name === '') return; // spec: unnamed ports have no SRV record
  const name = `_${p.name}._${p.protocol.toLowerCase()}.${fqdn}`;
  if (
    z.records
      .get(name)
      ?.some((r) => r.type === 'SRV' && r.data.target === target && r.data.port === port)
  )
    return;
  add(z, { type: 'SRV', name, ttl: z.ttl, data: { priority: 0, weight: 100, port, target } });
}

/** CoreDNS gives the records of one SRV set equal shares of 100 (RFC 2782 weights). */
function spreadSrvWeights(z: Zone): void {
  for (const rrs of z.records.values()) {
    const srv = rrs.filter((r) => r.type === 'SRV');
    for (const r of srv) if (r.type === 'SRV') r.data.weight = Math.floor(100 / srv.length);
  }
}

function addressRecord(name: string, ip: string, ttl: number): Answer {
  return isIPv6(ip) ? { type: 'AAAA', name, ttl, data: ip } : { type: 'A', name, ttl, data: ip };
}

function addPtr(z: Zone, ip: string, target: string): void {
  // IPv6 reverse names (ip6.arpa nibbles) are not built: the lab is IPv4 only.
  if (!isIPv4(ip)) return;
  const name = `${ip.split('.').reverse().join('.')}.in-addr.arpa`;
  if (z.records.get(name)?.some((r) => r.type === 'PTR')) return; // one owner per address
  add(z, { type: 'PTR', name, ttl: z.ttl, data: target });
}

function add(z: Zone, rr: Answer): void {
  const list = z.records.get(rr.name);
  if (list) list.push(rr);
  else z.records.set(rr.name, [rr]);
  addName(z, rr.name);
}

function addName(z: Zone, name: string): void {
  // The name and every ancestor inside the zone exist (empty non-terminals answer NODATA);
  // of a reverse name, only the name itself.
  z.names.add(name);
  if (!inZone(z, name)) return;
  for (let n = name; n !== z.domain; ) {
    n = n.slice(n.indexOf('.') + 1);
    z.names.add(n);
  }
}

export function inZone(z: Zone, name: string): boolean {
  return name === z.domain || name.endsWith(`.${z.domain}`);
}

const POD_NAME = /^(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})\.[^.]+\.pod$/;
/** CNAME chains inside the zone are followed at most this far (ExternalName to ExternalName). */
const MAX_CHAIN = 8;

/** Answers one question (name as asked, any case; type as dns-packet names it). */
export function lookup(z: Zone, qname: string, qtype: string): Lookup {
  const answers: Answer[] = [];
  let name = qname.replace(/\.$/, '').toLowerCase();
  if (!inZone(z, name) && !z.records.has(name))
    return { status: 'outside', answers, additionals: [] };
  for (let hop = 0; hop < MAX_CHAIN; hop++) {
    const rrs = recordsAt(z, name);
    const cname = rrs.find((r) => r.type === 'CNAME');
    if (cname?.type === 'CNAME' && qtype !== 'CNAME' && qtype !== 'ANY') {
      answers.push(cname);
      name = cname.data;
      if (inZone(z, name)) continue;
      return { status: 'answer', answers, additionals: [] };
    }
    const match = rrs.filter((r) => r.type === qtype || (qtype === 'ANY' && r.type !== 'NS'));
    answers.push(...match);
    if (answers.length > 0)
      return { status: 'answer', answers, additionals: additionalsFor(z, match) };
    return {
      status: z.names.has(name) || rrs.length > 0 ? 'nodata' : 'nxdomain',
      answers,
      additionals: [],
    };
  }
  return { status: 'answer', answers, additionals: [] };
}

function recordsAt(z: Zone, name: string): Answer[] {
  const rrs = z.records.get(name);
  if (rrs) return rrs;
  if (!name.endsWith(`.${z.domain}`)) return [];
  const m = POD_NAME.exec(name.slice(0, -z.domain.length - 1));
  if (!m || m.slice(1, 5).some((o) => Number(o) > 255)) return [];
  return [{ type: 'A', name, ttl: z.ttl, data: m.slice(1, 5).map(Number).join('.') }];
}

/** The address records of SRV targets (spec 2.3.2 / 2.4.2: "may include"). */
function additionalsFor(z: Zone, answers: Answer[]): Answer[] {
  const out: Answer[] = [];
  for (const r of answers) {
    if (r.type !== 'SRV') continue;
    for (const a of z.records.get(r.data.target) ?? [])
      if (a.type === 'A' || a.type === 'AAAA') out.push(a);
  }
  return out;
}
