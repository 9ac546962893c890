// The node's pod address manager, as the host-local CNI IPAM plugin does it: addresses from the
// node's pod CIDR, never the network, gateway (first) or broadcast address, handed out in order
// after the last one given (so an address just released is not reused at once, while stale
// conntrack entries and caches may still point at it), wrapping at the end of the range.
import { ipToU32, parseCidr, u32ToIp } from '../lab/topology.ts';

export class PodIpam {
  private readonly first: number;
  private readonly last: number;
  private readonly used = new Set<number>();
  private cursor: number;

  constructor(readonly cidr: string) {
    const c = parseCidr(cidr);
    this.first = (c.addr + 2) >>> 0; // +1 is the node's gateway
    this.last = ((c.addr | (~c.mask >>> 0)) - 1) >>> 0;
    this.cursor = this.first - 1;
  }

  /** Takes a given address; false if it is outside the range or taken. */
  reserve(ip: string): boolean {
    const a = ipToU32(ip);
    if (a < this.first || a > this.last || this.used.has(a)) return false;
    this.used.add(a);
    return true;
  }

  next(): string | undefined {
    const size = this.last - this.first + 1;
    for (let i = 1; i <= size; i++) {
      const a = this.first + ((this.cursor - this.first + i) % size);
      if (!this.used.has(a)) {
        this.used.add(a);
        this.cursor = a;
        return u32ToIp(a);
      }
    }
    return undefined;
  }

  release(ip: string): void {
    this.used.delete(ipToU32(ip));
  }
}
