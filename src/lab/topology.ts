// The lab topology: a small YAML file (nodes, their pods, pod CIDRs, node IPs, external clients)
// turned into a fully derived plan of names and addresses. Everything the lab creates is named
// here, once, so `lab up`, `lab down`, `lab status` and the demos agree on it.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { type ErrorOptions, UserError } from '../errors.ts';
import { cidr6Contains, groupsToIpv6, ipv6Groups, parseCidr6 } from '../wire/addr6.ts';

/**
 * Every namespace the lab creates starts with LAB_PREFIX (KUBETUN_LAB_PREFIX), so a sweep can
 * never touch anything else; src/lab/prefix.ts says what else follows from it.
 */
import { LAB_PREFIX } from './prefix.ts';

export { LAB_PREFIX } from './prefix.ts';
export const UNDERLAY_NS = `${LAB_PREFIX}underlay`;
export const UNDERLAY_BRIDGE = 'br0';
/** The pods' bridge on a node of a `cni: bridge` topology (flannel's and the bridge plugin's name). */
export const POD_BRIDGE = 'cni0';
/**
 * How pods are joined to their node (topology field `cni`):
 *   routes  per-pod veths, the gateway as a /32 on each + proxy_arp, a /32 route per pod
 *           (kindnet, Calico; the default)
 *   bridge  every pod veth a port of the node's cni0 bridge, which holds the gateway as
 *           <gateway>/<pod prefix>; pods have <ip>/<pod prefix> (flannel, the bridge plugin)
 */
export type CniLayout = 'routes' | 'bridge';
export const CNI_LAYOUTS: readonly CniLayout[] = ['routes', 'bridge'];
/** Linux interface names hold at most 15 bytes (IFNAMSIZ - 1). */
const IFNAME_MAX = 15;

export interface LabPod {
  name: string;
  ip: string;
  node: string;
  ns: string;
  /** the node-side veth; the node routes <ip>/32 through it */
  hostIf: string;
  /** the pod's own end of the veth */
  podIf: string;
  /** the Pod's labels (what Service selectors match) */
  labels?: Record<string, string>;
  /** the Pod's image (src/cluster/images.ts; default kubetun/echo) */
  image?: string;
  /** a dual-stack topology: the pod's IPv6 address (podAddress6: its node's podCidrV6 + the
   * IPv4 address's offset in the pod CIDR) */
  ip6?: string;
}

export interface LabNode {
  name: string;
  ip: string;
  podCidr: string;
  /** first address of the pod CIDR, put on every node-side veth as a /32 */
  gateway: string;
  ns: string;
  /** the node's interface on the underlay (inside its namespace) */
  uplink: string;
  /** the other end of the uplink, enslaved to the bridge in the underlay namespace */
  underlayIf: string;
  pods: LabPod[];
  /** the Node's labels, e.g. topology.kubernetes.io/zone */
  labels?: Record<string, string>;
  /** how its pods are joined to it (the topology's `cni`; absent = routes) */
  cni?: CniLayout;
  /** a dual-stack topology: the node's IPv6 address on the underlay (hostAddress6) */
  ip6?: string;
  /** a dual-stack topology: its IPv6 pod CIDR; the gateway is its first address */
  podCidrV6?: string;
  gateway6?: string;
}

export interface LabClient {
  name: string;
  ip: string;
  /** a dual-stack topology: the client's IPv6 address on the underlay */
  ip6?: string;
  ns: string;
  uplink: string;
  underlayIf: string;
}

export interface Topology {
  file: string;
  /** sha256 of the file's text */
  hash: string;
  name: string;
  /** absolute path of the manifests directory */
  manifests: string;
  clusterCidr: string;
  serviceCidr: string;
  /** the pod network layout of every node (CniLayout) */
  cni: CniLayout;
  underlayCidr: string;
  underlayPrefix: number;
  nodes: LabNode[];
  clients: LabClient[];
  httpPort: number;
  udpPort: number;
  /** the topology's `ipv6` block: absent = an IPv4-only lab */
  ipv6?: TopologyV6;
}

/**
 * A dual-stack topology (the `ipv6` block): every IPv4 address keeps its place in the IPv6
 * prefix of the same role — a node or client at offset N of the underlay CIDR is at offset N of
 * underlayCidr, a pod at offset N of its node's podCidr at offset N of the node's podCidrV6 —
 * so the topology file names each IPv6 prefix once and no address twice.
 */
export interface TopologyV6 {
  underlayCidr: string;
  underlayPrefix: number;
  clusterCidr: string;
  serviceCidr: string;
}

/** A topology file that cannot be used; the message names the file, object and field. */
export class TopologyError extends UserError {
  constructor(
    readonly file: string,
    readonly object: string,
    readonly field: string,
    problem: string,
    options: ErrorOptions = {},
  ) {
    // "file" / "-" mean the file as a whole: the message then names just the file.
    const where = [file, object === 'file' ? '' : object, field === '-' ? '' : field];
    super('TOPOLOGY', `${where.filter((w) => w !== '').join(': ')}: ${problem}`, options);
  }
}

export function loadTopology(file: string): Topology {
  const abs = resolve(file);
  let text: string;
  try {
    text = readFileSync(abs, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new TopologyError(abs, 'file', '-', `cannot read (${code})`, {
      hint: '--topology names a lab topology YAML (default lab/topology.yaml; see lab/README.md)',
    });
  }
  return parseTopology(text, abs);
}

type Obj = Record<string, unknown>;

export function parseTopology(text: string, file: string): Topology {
  const docs = parseAllDocuments(text);
  if (docs.length !== 1) throw new TopologyError(file, 'file', '-', 'expected one YAML document');
  const doc = docs[0]!;
  if (doc.errors.length > 0) {
    // yaml's message starts "<what> at line L, column C:" and then quotes the source.
    const first = doc.errors[0]!.message.split('\n')[0]!.replace(/:$/, '');
    throw new TopologyError(file, 'file', '-', `YAML syntax error: ${first}`);
  }
  const root = doc.toJS() as unknown;
  if (!isObj(root)) throw new TopologyError(file, 'file', '-', 'expected a mapping');
  const f = new Fields(file);
  const underlay = f.obj(root, 'topology', 'underlay');
  const underlayCidr = f.cidr(underlay, 'underlay', 'cidr');
  const clusterCidr = f.cidr(root, 'topology', 'clusterCidr');
  const servers = isObj(root.servers) ? root.servers : {};
  const cni = root.cni === undefined ? 'routes' : f.str(root, 'topology', 'cni');
  if (!(CNI_LAYOUTS as readonly string[]).includes(cni))
    f.fail('topology', 'cni', `"${cni}" is not one of ${CNI_LAYOUTS.join(', ')}`);
  const topo: Topology = {
    file,
    hash: createHash('sha256').update(text).digest('hex'),
    name: typeof root.name === 'string' ? root.name : 'kubetun-lab',
    manifests: resolve(dirname(file), f.str(root, 'topology', 'manifests')),
    clusterCidr,
    serviceCidr: f.cidr(root, 'topology', 'serviceCidr'),
    cni: cni as CniLayout,
    underlayCidr,
    underlayPrefix: parseCidr(underlayCidr).prefix,
    nodes: f
      .list(root, 'topology', 'nodes')
      .map((n, i) => ({ ...parseNode(f, n, i), cni: cni as CniLayout })),
    clients: (root.clients === undefined ? [] : f.list(root, 'topology', 'clients')).map((c, i) =>
      parseClient(f, c, i),
    ),
    httpPort: servers.http === undefined ? 8080 : f.port(servers, 'servers', 'http'),
    udpPort: servers.udp === undefined ? 5353 : f.port(servers, 'servers', 'udp'),
  };
  if (root.ipv6 !== undefined) addIpv6(f, topo, f.obj(root, 'topology', 'ipv6'), root);
  validateTopology(topo);
  return topo;
}

/** The `ipv6` block and each node's podCidrV6; the hosts' and pods' IPv6 addresses from them. */
function addIpv6(f: Fields, t: Topology, v6: Obj, root: Obj): void {
  const underlayCidr = f.cidr6(v6, 'ipv6', 'underlayCidr');
  t.ipv6 = {
    underlayCidr,
    underlayPrefix: parseCidr6(underlayCidr)!.prefix,
    clusterCidr: f.cidr6(v6, 'ipv6', 'clusterCidr'),
    serviceCidr: f.cidr6(v6, 'ipv6', 'serviceCidr'),
  };
  const rawNodes = root.nodes as Obj[];
  t.nodes.forEach((n, i) => {
    const podCidrV6 = f.cidr6(rawNodes[i]!, `node ${n.name}`, 'podCidrV6');
    if (!cidr6Inside(podCidrV6, t.ipv6!.clusterCidr))
      f.fail(
        `node ${n.name}`,
        'podCidrV6',
        `${podCidrV6} is not inside ipv6.clusterCidr ${t.ipv6!.clusterCidr}`,
      );
    n.podCidrV6 = podCidrV6;
    n.gateway6 = offset6(podCidrV6, 1);
    n.ip6 = hostAddress6(t, n.ip);
    for (const p of n.pods) p.ip6 = podAddress6(n, p.ip);
  });
  for (const c of t.clients) c.ip6 = hostAddress6(t, c.ip);
}

/** The address `n` past the network address of an IPv6 CIDR (n < 2^32). */
function offset6(cidr: string, n: number): string {
  const g = [...parseCidr6(cidr)!.groups];
  const lo = ((g[6]! << 16) | g[7]!) + n;
  g[6] = Math.floor(lo / 65536) & 0xffff;
  g[7] = lo & 0xffff;
  return groupsToIpv6(g);
}

/** A node's or client's IPv6 address: its IPv4 address's offset in the underlay, in ipv6.underlayCidr. */
export function hostAddress6(t: Topology, ip: string): string | undefined {
  if (!t.ipv6) return undefined;
  const c = parseCidr(t.underlayCidr);
  return offset6(t.ipv6.underlayCidr, (ipToU32(ip) - c.addr) >>> 0);
}

/** A pod's IPv6 address on a dual-stack node: its IPv4 address's offset in podCidr, in podCidrV6. */
export function podAddress6(n: LabNode, ip: string): string | undefined {
  if (!n.podCidrV6) return undefined;
  return offset6(n.podCidrV6, (ipToU32(ip) - parseCidr(n.podCidr).addr) >>> 0);
}

function cidr6Inside(inner: string, outer: string): boolean {
  const a = parseCidr6(inner)!;
  const b = parseCidr6(outer)!;
  return a.prefix >= b.prefix && cidr6Contains(b, a.groups);
}

function parseNode(f: Fields, raw: unknown, i: number): LabNode {
  const where = `nodes[${i}]`;
  if (!isObj(raw)) throw new TopologyError(f.file, where, '-', 'expected a mapping');
  const name = f.name(raw, where, 'name', IFNAME_MAX - 2);
  const podCidr = f.cidr(raw, `node ${name}`, 'podCidr');
  const c = parseCidr(podCidr);
  const node: LabNode = {
    name,
    ip: f.ip(raw, `node ${name}`, 'ip'),
    podCidr,
    gateway: u32ToIp((c.addr + 1) >>> 0),
    ns: LAB_PREFIX + name,
    uplink: 'eth0',
    underlayIf: `u-${name}`,
    pods: [],
    labels: f.labels(raw, `node ${name}`),
  };
  node.pods = f.list(raw, `node ${name}`, 'pods').map((p, j) => parsePod(f, p, j, node));
  return node;
}

function parsePod(f: Fields, raw: unknown, j: number, node: LabNode): LabPod {
  const where = `node ${node.name}: pods[${j}]`;
  if (!isObj(raw)) throw new TopologyError(f.file, where, '-', 'expected a mapping');
  const name = f.name(raw, where, 'name', IFNAME_MAX - 'veth-'.length);
  return {
    name,
    ip: f.ip(raw, `pod ${name}`, 'ip'),
    node: node.name,
    ns: LAB_PREFIX + name,
    hostIf: `veth-${name}`,
    podIf: 'eth0',
    labels: f.labels(raw, `pod ${name}`),
    image: raw.image === undefined ? undefined : f.str(raw, `pod ${name}`, 'image'),
  };
}

function parseClient(f: Fields, raw: unknown, i: number): LabClient {
  const where = `clients[${i}]`;
  if (!isObj(raw)) throw new TopologyError(f.file, where, '-', 'expected a mapping');
  const name = f.name(raw, where, 'name', IFNAME_MAX - 2);
  return {
    name,
    ip: f.ip(raw, `client ${name}`, 'ip'),
    ns: LAB_PREFIX + name,
    uplink: 'eth0',
    underlayIf: `u-${name}`,
  };
}

/** Cross-field rules: addresses inside their CIDRs, nothing used twice. */
function validateTopology(t: Topology): void {
  const err = (object: string, field: string, problem: string) =>
    new TopologyError(t.file, object, field, problem);
  if (t.nodes.length === 0) throw err('topology', 'nodes', 'at least one node is needed');
  const names = new Map<string, string>([['underlay', 'the underlay namespace']]);
  const ips = new Map<string, string>();
  const claim = (map: Map<string, string>, key: string, who: string, field: string) => {
    const prev = map.get(key);
    if (prev) throw err(who, field, `${key} is already used by ${prev}`);
    map.set(key, who);
  };
  const under = parseCidr(t.underlayCidr);
  const cluster = parseCidr(t.clusterCidr);
  const hosts = [
    ...t.nodes.map((n) => ({ kind: 'node', ...n })),
    ...t.clients.map((c) => ({ kind: 'client', ...c })),
  ];
  for (const h of hosts) {
    const who = `${h.kind} ${h.name}`;
    claim(names, h.name, who, 'name');
    claim(ips, h.ip, who, 'ip');
    if (!isUsableHost(under, ipToU32(h.ip)))
      throw err(who, 'ip', `${h.ip} is not a host address in underlay ${t.underlayCidr}`);
  }
  for (let i = 0; i < t.nodes.length; i++) {
    const n = t.nodes[i]!;
    const pc = parseCidr(n.podCidr);
    if (!cidrInside(pc, cluster))
      throw err(
        `node ${n.name}`,
        'podCidr',
        `${n.podCidr} is not inside clusterCidr ${t.clusterCidr}`,
      );
    if (pc.prefix > 30)
      throw err(`node ${n.name}`, 'podCidr', 'needs room for a gateway and pods (prefix <= 30)');
    for (const other of t.nodes.slice(0, i)) {
      if (cidrOverlap(pc, parseCidr(other.podCidr)))
        throw err(`node ${n.name}`, 'podCidr', `overlaps node ${other.name}'s ${other.podCidr}`);
    }
    for (const p of n.pods) {
      claim(names, p.name, `pod ${p.name}`, 'name');
      claim(ips, p.ip, `pod ${p.name}`, 'ip');
      const a = ipToU32(p.ip);
      if (!isUsableHost(pc, a) || p.ip === n.gateway)
        throw err(
          `pod ${p.name}`,
          'ip',
          `${p.ip} is not a pod address in ${n.podCidr} (the gateway ${n.gateway} is taken)`,
        );
    }
  }
}

/** Reads typed fields and names the file, object and field when one is wrong. */
class Fields {
  constructor(readonly file: string) {}
  fail(object: string, field: string, problem: string): never {
    throw new TopologyError(this.file, object, field, problem);
  }
  str(o: Obj, object: string, field: string): string {
    const v = o[field];
    if (v === undefined) this.missing(o, object, field);
    if (typeof v !== 'string' || v === '') this.fail(object, field, 'expected a non-empty string');
    return v;
  }
  /** A field that is not there, with the key the user probably meant it to be (podCIDR). */
  missing(o: Obj, object: string, field: string): never {
    const near = Object.keys(o).find((k) => k.toLowerCase() === field.toLowerCase());
    this.fail(
      object,
      field,
      near ? `missing (found "${near}": did you mean "${field}"?)` : 'missing',
    );
  }
  obj(o: Obj, object: string, field: string): Obj {
    const v = o[field];
    if (v === undefined) this.missing(o, object, field);
    if (!isObj(v)) this.fail(object, field, 'expected a mapping');
    return v;
  }
  list(o: Obj, object: string, field: string): unknown[] {
    const v = o[field];
    if (v === undefined) this.missing(o, object, field);
    if (!Array.isArray(v)) this.fail(object, field, 'expected a list');
    return v;
  }
  name(o: Obj, object: string, field: string, max: number): string {
    const v = this.str(o, object, field);
    if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(v) || v.length > max) {
      this.fail(
        object,
        field,
        `"${v}" must be lowercase letters, digits and '-', at most ${max} characters (it names interfaces)`,
      );
    }
    return v;
  }
  ip(o: Obj, object: string, field: string): string {
    const v = this.str(o, object, field);
    if (!isIpv4(v)) this.fail(object, field, `"${v}" is not an IPv4 address`);
    return v;
  }
  cidr(o: Obj, object: string, field: string): string {
    const v = this.str(o, object, field);
    const c = tryParseCidr(v);
    if (!c) this.fail(object, field, `"${v}" is not an IPv4 CIDR like 10.0.0.0/24`);
    if ((c.addr & c.mask) >>> 0 !== c.addr) this.fail(object, field, `"${v}" has host bits set`);
    return v;
  }
  cidr6(o: Obj, object: string, field: string): string {
    const v = this.str(o, object, field);
    const c = parseCidr6(v);
    if (!c || !v.includes(':'))
      this.fail(object, field, `"${v}" is not an IPv6 CIDR like fd00:10:244:1::/64`);
    if (ipv6Groups(v.split('/')[0]!)!.some((g, i) => g !== c.groups[i]))
      this.fail(object, field, `"${v}" has host bits set`);
    if (c.prefix > 120) this.fail(object, field, 'needs room for addresses (prefix <= 120)');
    return c.text;
  }
  /** An optional map of label names to string values. */
  labels(o: Obj, object: string): Record<string, string> {
    const v = o.labels;
    if (v === undefined) return {};
    if (!isObj(v)) this.fail(object, 'labels', 'expected a mapping of label names to values');
    for (const [k, x] of Object.entries(v))
      if (typeof x !== 'string')
        this.fail(object, `labels.${k}`, 'label values are strings (quote them)');
    return v as Record<string, string>;
  }
  port(o: Obj, object: string, field: string): number {
    const v = o[field];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > 65535)
      this.fail(object, field, 'expected a port 1..65535');
    return v;
  }
}

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

// Address arithmetic for the slow world (kept here so the lab does not depend on the datapath).

export function isIpv4(s: string): boolean {
  const parts = s.split('.');
  return (
    parts.length === 4 && parts.every((p) => /^(0|[1-9][0-9]{0,2})$/.test(p) && Number(p) <= 255)
  );
}

export function ipToU32(s: string): number {
  if (!isIpv4(s)) throw new Error(`not an IPv4 address: ${s}`);
  return s.split('.').reduce((acc, p) => ((acc << 8) | Number(p)) >>> 0, 0);
}

export function u32ToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

export interface Cidr {
  addr: number;
  prefix: number;
  mask: number;
}

function tryParseCidr(s: string): Cidr | undefined {
  const m = /^([0-9.]+)\/([0-9]{1,2})$/.exec(s);
  if (!m || !isIpv4(m[1]!) || Number(m[2]) > 32) return undefined;
  const prefix = Number(m[2]);
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  return { addr: ipToU32(m[1]!), prefix, mask };
}

export function parseCidr(s: string): Cidr {
  const c = tryParseCidr(s);
  if (!c) throw new Error(`not an IPv4 CIDR: ${s}`);
  return c;
}

export function cidrContains(c: Cidr, addr: number): boolean {
  return (addr & c.mask) >>> 0 === (c.addr & c.mask) >>> 0;
}

function cidrInside(inner: Cidr, outer: Cidr): boolean {
  return inner.prefix >= outer.prefix && cidrContains(outer, inner.addr);
}

function cidrOverlap(a: Cidr, b: Cidr): boolean {
  return cidrContains(a, b.addr) || cidrContains(b, a.addr);
}

/** Inside the CIDR and neither its network nor its broadcast address. */
function isUsableHost(c: Cidr, addr: number): boolean {
  const bcast = (c.addr | (~c.mask >>> 0)) >>> 0;
  return cidrContains(c, addr) && addr !== c.addr && addr !== bcast;
}

/** Every namespace the topology names, underlay first. */
export function labNamespaces(t: Topology): string[] {
  return [
    UNDERLAY_NS,
    ...t.nodes.map((n) => n.ns),
    ...t.nodes.flatMap((n) => n.pods.map((p) => p.ns)),
    ...t.clients.map((c) => c.ns),
  ];
}

export function allPods(t: Topology): LabPod[] {
  return t.nodes.flatMap((n) => n.pods);
}

/** The namespace for a lab exec target: a pod, node or client name, or "underlay". */
export function targetNamespace(t: Topology, target: string): string | undefined {
  if (target === 'underlay') return UNDERLAY_NS;
  const hit = [...t.nodes, ...allPods(t), ...t.clients].find((x) => x.name === target);
  return hit?.ns;
}
