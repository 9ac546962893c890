// The two halves of a service port in the loader's state (load.ts, nodeport.ts): each family
// it has a ClusterIP of is planned and written as a unit of its own, named by the service port
// name (IPv4) or the name and " (IPv6)". A service port name holds no space, so the two never
// meet, and the deletion of a service port removes both.
import type { IPFamily } from '../model.ts';

/** The families a service port is planned for, in the order they are written. */
export const FAMILIES: readonly IPFamily[] = ['IPv4', 'IPv6'];

const IPV6_UNIT = ' (IPv6)';

/** The loader's name of one family's half of service port `spn`. */
export function unitOf(spn: string, family: IPFamily): string {
  return family === 'IPv4' ? spn : `${spn}${IPV6_UNIT}`;
}

/** The service port a unit belongs to. */
export function portOfUnit(unit: string): string {
  return unit.endsWith(IPV6_UNIT) ? unit.slice(0, -IPV6_UNIT.length) : unit;
}

/** Whether a unit is an IPv6 half. */
export function isIpv6Unit(unit: string): boolean {
  return unit.endsWith(IPV6_UNIT);
}
