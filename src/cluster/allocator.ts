// The apiserver's two Service allocators: ClusterIPs from --service-cluster-ip-range and node
// ports from --service-node-port-range (pkg/registry/core/service/ipallocator, portallocator).
//
// Facts kept from the apiserver:
//   - the network address and the broadcast address of an IPv4 service CIDR are never handed
//     out (a /31 or /32 has no usable address); everything between is;
//   - each range has a lower "static" band, min(max(16, size/16), 256) IPs and
//     min(max(16, size/32), 128) ports (none when the range has <= 16 members; KEP-3070 and
//     KEP-3668): dynamic allocation takes from the upper band first and only falls back to the
//     lower one when the upper is full, so hand-picked values in the lower band rarely collide;
//   - one node-port pool for every protocol: 30080/TCP in one Service and 30080/UDP in another
//     collide (one Service may use one number for both protocols: the caller reserves it once);
//   - the messages: "provided IP is already allocated", "provided port is not in the valid
//     range. The range of valid ports is 30000-32767", "range is full".
// One difference: the apiserver picks at random inside a band; this picks the lowest free
// member, so a lab brought up twice gets the same addresses (demos, docs and tests rely on it).
//
// A dual-stack lab (serviceCidrV6) has a second ClusterIP range: IPv6 addresses are held in the
// same 'clusterIP' pool (told apart by their text), from the network address + 1 on (an IPv6
// range has no broadcast address; ranges wider than 2^24 are used up to there), with the same
// static band.
//
// Every value has an owner ("Service default/web"), so a conflict can say who holds it. The state
// is plain JSON (toJSON/fromJSON) for the lab's store: allocation survives restarts.
import { serviceIPRange } from '../manifests/ip.ts';
import { cidrContains, cidrToString, ipv4ToU32, parseCidr, u32ToIpv4 } from '../wire/addr.ts';
import { cidr6Contains, type Cidr6, groupsToIpv6, ipv6Groups, parseCidr6 } from '../wire/addr6.ts';

export type Pool = 'clusterIP' | 'nodePort';
export type ReserveResult = 'ok' | 'taken' | 'out-of-range';

export interface PortRange {
  min: number;
  max: number;
}

export const DEFAULT_NODE_PORT_RANGE: PortRange = { min: 30000, max: 32767 };

export interface AllocatorOptions {
  serviceCidr: string;
  /** the IPv6 service CIDR of a dual-stack lab */
  serviceCidrV6?: string;
  nodePortRange?: PortRange;
  /** values held from the start, e.g. {'10.96.0.1': 'Service default/kubernetes'} */
  reserved?: Record<string, string>;
}

export interface AllocatorJSON {
  serviceCidr: string;
  serviceCidrV6?: string;
  nodePortRange: PortRange;
  clusterIPs: Record<string, string>;
  nodePorts: Record<string, string>;
}

/** min(max(lo, size/step), hi), 0 for ranges of `lo` members or fewer (the apiserver's). */
function staticBand(size: number, lo: number, step: number, hi: number): number {
  if (size <= lo) return 0;
  return Math.min(Math.max(lo, Math.floor(size / step)), hi);
}

/** One range of integers [first, first+size) with a lower static band. */
class Range {
  readonly owners = new Map<number, string>();
  private readonly band: number;
  constructor(
    readonly first: number,
    readonly size: number,
    band: number,
  ) {
    this.band = band;
  }

  contains(v: number): boolean {
    return v >= this.first && v < this.first + this.size;
  }

  reserve(v: number, owner: string): ReserveResult {
    if (!this.contains(v)) return 'out-of-range';
    const held = this.owners.get(v);
    if (held !== undefined && held !== owner) return 'taken';
    this.owners.set(v, owner);
    return 'ok';
  }

  /** Lowest free member of the upper band, else of the lower band; undefined when full. */
  next(owner: string): number | undefined {
    const bandEnd = this.first + this.band;
    for (let v = bandEnd; v < this.first + this.size; v++) {
      if (!this.owners.has(v)) return this.take(v, owner);
    }
    for (let v = this.first; v < bandEnd; v++) {
      if (!this.owners.has(v)) return this.take(v, owner);
    }
    return undefined;
  }

  private take(v: number, owner: string): number {
    this.owners.set(v, owner);
    return v;
  }
}

/** The offset of IPv6 text inside a CIDR, or undefined (not IPv6, outside, beyond 2^24). */
function offset6(c: Cidr6, text: string): number | undefined {
  const g = ipv6Groups(text);
  if (!g || !cidr6Contains(c, g)) return undefined;
  if (g.slice(0, 6).some((x, i) => x !== c.groups[i])) return undefined;
  const off = g[6]! * 65536 + g[7]! - (c.groups[6]! * 65536 + c.groups[7]!);
  return off >= 0 && off < 2 ** 24 ? off : undefined;
}

function fromOffset6(c: Cidr6, off: number): string {
  const g = [...c.groups];
  const lo = g[6]! * 65536 + g[7]! + off;
  g[6] = Math.floor(lo / 65536) & 0xffff;
  g[7] = lo & 0xffff;
  return groupsToIpv6(g);
}

export class Allocator {
  readonly serviceCidr: string;
  readonly serviceCidrV6: string | undefined;
  readonly nodePortRange: PortRange;
  private readonly ips: Range;
  private readonly ports: Range;
  private readonly cidr6: Cidr6 | undefined;
  private readonly ips6: Range | undefined;

  constructor(opts: AllocatorOptions) {
    const cidr = parseCidr(opts.serviceCidr);
    this.serviceCidr = cidrToString(cidr);
    this.cidr6 = opts.serviceCidrV6 ? (parseCidr6(opts.serviceCidrV6) ?? undefined) : undefined;
    this.serviceCidrV6 = this.cidr6?.text;
    if (this.cidr6) {
      const size = 2 ** Math.min(128 - this.cidr6.prefix, 24);
      this.ips6 = new Range(1, size - 1, staticBand(size, 16, 16, 256));
    }
    const usable = serviceIPRange(this.serviceCidr);
    // the IP band is sized from the whole CIDR (network and broadcast included), as upstream
    const band = staticBand(2 ** (32 - cidr.prefix), 16, 16, 256);
    this.ips = new Range(usable.first, usable.size, band);
    this.nodePortRange = { ...(opts.nodePortRange ?? DEFAULT_NODE_PORT_RANGE) };
    const { min, max } = this.nodePortRange;
    this.ports = new Range(min, max - min + 1, staticBand(max - min + 1, 16, 32, 128));
    for (const [value, owner] of Object.entries(opts.reserved ?? {})) {
      const pool: Pool = value.includes('.') ? 'clusterIP' : 'nodePort';
      this.reserve(pool, value, owner);
    }
  }

  /** The next free value of a pool, held for `owner`; undefined when the range is full. */
  allocate(pool: 'clusterIP', owner: string): string | undefined;
  allocate(pool: 'nodePort', owner: string): number | undefined;
  allocate(pool: Pool, owner: string): string | number | undefined {
    const v = this.range(pool).next(owner);
    if (v === undefined) return undefined;
    return pool === 'clusterIP' ? u32ToIpv4(v) : v;
  }

  /** The next free IPv6 ClusterIP (a dual-stack lab), held for `owner`; undefined when full or none. */
  allocate6(owner: string): string | undefined {
    const v = this.ips6?.next(owner);
    return v === undefined || !this.cidr6 ? undefined : fromOffset6(this.cidr6, v);
  }

  /**
   * Holds a requested value for `owner`. Reserving what the same owner already holds is 'ok'
   * (an update that keeps its clusterIP). A malformed IP is 'out-of-range'.
   */
  reserve(pool: Pool, value: string | number, owner: string): ReserveResult {
    const v = this.toNumber(pool, value);
    if (v === undefined) return 'out-of-range';
    return this.range(pool, value).reserve(v, owner);
  }

  /** Gives a value back (a no-op for values not held or out of range, as the apiserver's). */
  release(pool: Pool, value: string | number): void {
    const v = this.toNumber(pool, value);
    if (v !== undefined) this.range(pool, value).owners.delete(v);
  }

  /** Gives back everything `owner` holds (the Service was deleted). */
  releaseOwner(owner: string): void {
    for (const r of [this.ips, this.ports, ...(this.ips6 ? [this.ips6] : [])]) {
      for (const [v, o] of [...r.owners]) if (o === owner) r.owners.delete(v);
    }
  }

  /** Who holds a value, or undefined. */
  owner(pool: Pool, value: string | number): string | undefined {
    const v = this.toNumber(pool, value);
    return v === undefined ? undefined : this.range(pool, value).owners.get(v);
  }

  /** The message the apiserver gives for a failed reservation. */
  explain(pool: Pool, result: Exclude<ReserveResult, 'ok'>, value?: string | number): string {
    if (pool === 'clusterIP') {
      const v6 = String(value ?? '').includes(':');
      const range = v6 ? (this.serviceCidrV6 ?? 'none: the lab is IPv4-only') : this.serviceCidr;
      return result === 'taken'
        ? 'provided IP is already allocated'
        : `provided IP is not in the valid range. The range of valid IPs is ${range}`;
    }
    const { min, max } = this.nodePortRange;
    return result === 'taken'
      ? 'provided port is already allocated'
      : `provided port is not in the valid range. The range of valid ports is ${min}-${max}`;
  }

  /** Whether an address is in the service CIDR at all (network/broadcast included). */
  inServiceCidr(ip: string): boolean {
    try {
      return cidrContains(parseCidr(this.serviceCidr), ipv4ToU32(ip));
    } catch {
      return false;
    }
  }

  toJSON(): AllocatorJSON {
    const dump = (r: Range, f: (v: number) => string) =>
      Object.fromEntries([...r.owners].sort((a, b) => a[0] - b[0]).map(([v, o]) => [f(v), o]));
    const cidr6 = this.cidr6;
    return {
      serviceCidr: this.serviceCidr,
      ...(this.serviceCidrV6 ? { serviceCidrV6: this.serviceCidrV6 } : {}),
      nodePortRange: { ...this.nodePortRange },
      clusterIPs: {
        ...dump(this.ips, u32ToIpv4),
        ...(this.ips6 && cidr6 ? dump(this.ips6, (v) => fromOffset6(cidr6, v)) : {}),
      },
      nodePorts: dump(this.ports, String),
    };
  }

  /**
   * Restores a saved state. Values outside a changed range are dropped (the apiserver's repair
   * loop reports them); pass the current flags as `opts` to re-range.
   */
  static fromJSON(json: AllocatorJSON, opts?: Partial<AllocatorOptions>): Allocator {
    const a = new Allocator({
      serviceCidr: opts?.serviceCidr ?? json.serviceCidr,
      serviceCidrV6: opts && 'serviceCidrV6' in opts ? opts.serviceCidrV6 : json.serviceCidrV6,
      nodePortRange: opts?.nodePortRange ?? json.nodePortRange,
    });
    for (const [ip, o] of Object.entries(json.clusterIPs ?? {})) a.reserve('clusterIP', ip, o);
    for (const [p, o] of Object.entries(json.nodePorts ?? {})) a.reserve('nodePort', Number(p), o);
    return a;
  }

  private range(pool: Pool, value?: string | number): Range {
    if (pool === 'clusterIP' && String(value).includes(':') && this.ips6) return this.ips6;
    return pool === 'clusterIP' ? this.ips : this.ports;
  }

  private toNumber(pool: Pool, value: string | number): number | undefined {
    if (pool === 'nodePort') {
      const n = typeof value === 'number' ? value : Number(value);
      return Number.isInteger(n) ? n : undefined;
    }
    if (String(value).includes(':'))
      return this.cidr6 ? offset6(this.cidr6, String(value)) : undefined;
    try {
      return ipv4ToU32(String(value));
    } catch {
      return undefined;
    }
  }
}
