// Validation of the NAT part of DatapathConfig (slow world: throws naming the field). Kept apart
// from config.ts so the NAT knobs and their rules live next to the code that uses them.
import { parseCidr } from '../../wire/addr.ts';
import { ipv6ToWords, parseCidr6Words } from '../../wire/addr6.ts';

export interface NatConfigFields {
  nodeIp: number;
  podGateway: number;
  podCidr: string;
  clusterCidr: string;
  snatPortMin: number;
  snatPortMax: number;
  snatCapacity: number;
  nodeIp6: string;
  podGateway6: string;
  podCidr6: string;
  clusterCidr6: string;
  snat6PortMin: number;
  snat6PortMax: number;
}

/**
 * The SNAT port range must be a power-of-two sized block aligned to its size (61440-62463 =
 * 0xF000/0xFC00): steering then matches it on the uplink with one u32 prefix/mask key, and
 * the node reserves exactly it in net.ipv4.ip_local_reserved_ports.
 */
export function checkNatConfig(c: NatConfigFields): void {
  for (const k of ['nodeIp', 'podGateway'] as const) {
    if (!Number.isInteger(c[k]) || c[k] < 0 || c[k] > 0xffffffff) {
      throw new Error(`datapath config: ${k} must be a u32 address, got ${c[k]}`);
    }
  }
  for (const k of ['podCidr', 'clusterCidr'] as const) {
    if (c[k] === '') continue;
    try {
      parseCidr(c[k]);
    } catch (e) {
      throw new Error(`datapath config: ${k}: ${(e as Error).message}`);
    }
  }
  for (const k of ['nodeIp6', 'podGateway6'] as const) {
    if (c[k] === '') continue;
    try {
      ipv6ToWords(c[k]);
    } catch (e) {
      throw new Error(`datapath config: ${k}: ${(e as Error).message}`);
    }
  }
  for (const k of ['podCidr6', 'clusterCidr6'] as const) {
    if (c[k] === '') continue;
    try {
      parseCidr6Words(c[k]);
    } catch (e) {
      throw new Error(`datapath config: ${k}: ${(e as Error).message}`);
    }
  }
  checkPortRange(c.snatPortMin, c.snatPortMax, 'snatPortMin..snatPortMax');
  checkPortRange(c.snat6PortMin, c.snat6PortMax, 'snat6PortMin..snat6PortMax');
  if (!Number.isInteger(c.snatCapacity) || c.snatCapacity < 1) {
    throw new Error(
      `datapath config: snatCapacity must be a positive integer, got ${c.snatCapacity}`,
    );
  }
}

function checkPortRange(lo: number, hi: number, what: string): void {
  const size = hi - lo + 1;
  if (!Number.isInteger(lo) || !Number.isInteger(hi) || lo < 1024 || hi > 65535 || size < 1) {
    throw new Error(`datapath config: ${what} must lie in 1024..65535, got ${lo}..${hi}`);
  }
  if ((size & (size - 1)) !== 0 || lo % size !== 0) {
    throw new Error(
      `datapath config: ${what} ${lo}..${hi} must be a power-of-two block aligned to its size (e.g. 61440..62463)`,
    );
  }
}

/** tc u32 value/mask of a checked SNAT range (dport match). */
export function snatRangeMask(lo: number, hi: number): { value: number; mask: number } {
  return { value: lo, mask: (0xffff & ~(hi - lo)) >>> 0 };
}
