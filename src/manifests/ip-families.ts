// spec.clusterIP, spec.clusterIPs, spec.ipFamilies and spec.ipFamilyPolicy of a Service: the
// apiserver's validation (pkg/apis/core/validation: ValidateServiceClusterIPsRelatedFields) and
// the Service registry's defaulting (pkg/registry/core/service/storage/alloc.go:
// initIPFamilyFields), in that order, with the apiserver's messages. kubetun allocates no
// ClusterIPs, so every family a Service ends up with needs its address in the manifest — which
// is what a Service read back from an apiserver always has.
//
// Registry defaults, for a new object:
//   ipFamilyPolicy  absent → RequireDualStack for a headless Service without selector, else
//                   SingleStack;
//   ipFamilies      inferred from clusterIPs, then [the cluster's primary family] when still
//                   empty; a policy other than SingleStack on a dual-stack cluster adds the
//                   other family.
// "The cluster" is the service CIDRs the agent was given (--service-cidr, one or two); without
// them every family is taken as configured, and the primary one is IPv4.

import type { IPFamily, IPFamilyPolicy, ServiceType } from '../model.ts';
import { cidrToString } from '../wire/addr.ts';
import type { Json, ObjectReader } from './fields.ts';
import {
  clusterIPRangeProblem,
  ipFamilyOf,
  ipProblem,
  type ServiceCidrs,
  serviceFamilies,
} from './ip.ts';

export const IP_FAMILIES: readonly IPFamily[] = ['IPv4', 'IPv6'];
export const IP_FAMILY_POLICIES: readonly IPFamilyPolicy[] = [
  'SingleStack',
  'PreferDualStack',
  'RequireDualStack',
];

export interface ClusterIPFields {
  clusterIPs: string[];
  ipFamilies: IPFamily[];
  ipFamilyPolicy?: IPFamilyPolicy;
}

const other = (f: IPFamily): IPFamily => (f === 'IPv4' ? 'IPv6' : 'IPv4');

export function readClusterIPFields(
  r: ObjectReader,
  spec: Json,
  type: ServiceType,
  cidrs: ServiceCidrs | undefined,
): ClusterIPFields {
  const single = r.str(spec.clusterIP, 'spec.clusterIP') ?? '';
  const list = r
    .list(spec.clusterIPs, 'spec.clusterIPs')
    .map((v, i) => r.reqStr(v, `spec.clusterIPs[${i}]`));
  const families = r
    .list(spec.ipFamilies, 'spec.ipFamilies')
    .map((v, i) => r.oneOf(v, `spec.ipFamilies[${i}]`, IP_FAMILIES, 'IPv4'));
  const given = r.str(spec.ipFamilyPolicy, 'spec.ipFamilyPolicy');
  if (type === 'ExternalName') return externalName(r, spec, single, list, families, given);
  let policy = given === undefined || given === '' ? undefined : readPolicy(r, given);
  checkFamilies(r, families);
  const ips = checkClusterIPs(r, single, list, type);
  const headless = ips[0] === 'None';
  const selectorless =
    spec.selector === undefined ||
    spec.selector === null ||
    Object.keys(r.map(spec.selector, 'spec.selector') ?? {}).length === 0;
  if (!headless) matchFamilies(r, ips, families);
  policy ??= headless && selectorless ? 'RequireDualStack' : 'SingleStack';
  if (policy === 'SingleStack') {
    if (ips.length === 2) dualNeeded(r, 'cluster IPs');
    if (families.length === 2) dualNeeded(r, 'IP families');
  }
  const configured = cidrs ? serviceFamilies(cidrs) : [...IP_FAMILIES];
  const primary = cidrs?.primary ?? 'IPv4';
  if (!headless) {
    ips.forEach((ip, i) => {
      const fam = ipFamilyOf(ip) as IPFamily;
      if (i < families.length) return;
      if (!configured.includes(fam)) {
        r.fail(
          'MANIFEST_CLUSTER_IP',
          `spec.clusterIPs[${i}]`,
          `${fam} is not configured on this cluster`,
        );
      }
      families.push(fam);
    });
  }
  if (headless && selectorless) {
    if (families.length === 0) families.push(primary);
    if (families.length < 2 && policy !== 'SingleStack') families.push(other(families[0]));
    return { clusterIPs: [], ipFamilies: families, ipFamilyPolicy: policy };
  }
  familiesConfigured(r, policy, families, configured);
  if (families.length === 0) families.push(primary);
  if (policy !== 'SingleStack' && families.length === 1 && configured.length === 2) {
    families.push(other(families[0]));
  }
  if (headless) return { clusterIPs: [], ipFamilies: families, ipFamilyPolicy: policy };
  checkRanges(r, ips, list.length > 0, cidrs);
  allocatedAll(r, ips, families, cidrs);
  return { clusterIPs: ips, ipFamilies: families, ipFamilyPolicy: policy };
}

function readPolicy(r: ObjectReader, v: string): IPFamilyPolicy {
  return r.oneOf(v, 'spec.ipFamilyPolicy', IP_FAMILY_POLICIES, 'SingleStack');
}

/** ExternalName: no ClusterIPs, and neither ipFamilies nor ipFamilyPolicy may be set. */
function externalName(
  r: ObjectReader,
  spec: Json,
  single: string,
  list: string[],
  families: IPFamily[],
  policy: string | undefined,
): ClusterIPFields {
  r.reqStr(spec.externalName, 'spec.externalName');
  if (single !== '' || list.length > 0) {
    r.fail(
      'MANIFEST_CLUSTER_IP',
      single !== '' ? 'spec.clusterIP' : 'spec.clusterIPs',
      'must be empty for type ExternalName',
    );
  }
  const forbidden = "may not be set when `type` is 'ExternalName'";
  if (families.length > 0) r.fail('MANIFEST_IP_FAMILY', 'spec.ipFamilies', forbidden);
  if (policy) r.fail('MANIFEST_IP_FAMILY', 'spec.ipFamilyPolicy', forbidden);
  return { clusterIPs: [], ipFamilies: [] };
}

function checkFamilies(r: ObjectReader, families: IPFamily[]): void {
  families.forEach((f, i) => {
    if (families.indexOf(f) !== i) {
      r.fail('MANIFEST_IP_FAMILY', `spec.ipFamilies[${i}]`, `Duplicate value: "${f}"`);
    }
  });
}

/** clusterIP and clusterIPs in sync, "None" alone, valid IPs, at most one per family. */
function checkClusterIPs(
  r: ObjectReader,
  single: string,
  list: string[],
  type: ServiceType,
): string[] {
  if (single !== '' && list.length > 0 && list[0] !== single) {
    r.fail(
      'MANIFEST_CLUSTER_IP',
      'spec.clusterIPs[0]',
      `"${list[0]}" must match spec.clusterIP "${single}"`,
    );
  }
  const ips = list.length > 0 ? list : single !== '' ? [single] : [];
  const field = (i: number) => (list.length > 0 ? `spec.clusterIPs[${i}]` : 'spec.clusterIP');
  if (ips.length === 0) {
    r.missing(
      'spec.clusterIP',
      ' (kubetun allocates no ClusterIPs: give an address, or "None" for a headless Service)',
    );
  }
  if (ips[0] === 'None') {
    if (type !== 'ClusterIP') {
      r.fail(
        'MANIFEST_CLUSTER_IP',
        field(0),
        `"None" (headless) is only allowed for type ClusterIP, not ${type}`,
      );
    }
    if (ips.length > 1) {
      r.fail('MANIFEST_CLUSTER_IP', 'spec.clusterIPs', "'None' must be the first and only value");
    }
    return ips;
  }
  ips.forEach((ip, i) => {
    const bad = ipProblem(ip);
    if (bad) r.fail('MANIFEST_CLUSTER_IP', field(i), `must be an IP address or "None": ${bad}`);
    if (ips.indexOf(ip) !== i) r.fail('MANIFEST_CLUSTER_IP', field(i), `duplicate address "${ip}"`);
  });
  if (ips.length > 2)
    r.fail('MANIFEST_CLUSTER_IP', 'spec.clusterIPs', 'may only hold up to 2 values');
  if (ips.length === 2 && ipFamilyOf(ips[0]) === ipFamilyOf(ips[1])) {
    r.fail(
      'MANIFEST_CLUSTER_IP',
      'spec.clusterIPs',
      'may specify no more than one IP for each IP family',
    );
  }
  return ips;
}

/** clusterIPs[i] of the family ipFamilies[i] names. */
function matchFamilies(r: ObjectReader, ips: string[], families: IPFamily[]): void {
  ips.forEach((ip, i) => {
    if (i < families.length && ipFamilyOf(ip) !== families[i]) {
      r.fail(
        'MANIFEST_CLUSTER_IP',
        `spec.clusterIPs[${i}]`,
        `Invalid value: "${ip}": expected an ${families[i]} value as indicated by \`ipFamilies[${i}]\``,
      );
    }
  });
}

function dualNeeded(r: ObjectReader, what: string): never {
  return r.fail(
    'MANIFEST_IP_FAMILY',
    'spec.ipFamilyPolicy',
    `Invalid value: "SingleStack": must be 'RequireDualStack' or 'PreferDualStack' when multiple ${what} are specified`,
  );
}

function familiesConfigured(
  r: ObjectReader,
  policy: IPFamilyPolicy,
  families: IPFamily[],
  configured: IPFamily[],
): void {
  if (policy === 'RequireDualStack' && configured.length < 2) {
    r.fail(
      'MANIFEST_IP_FAMILY',
      'spec.ipFamilyPolicy',
      'Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services',
    );
  }
  families.forEach((f, i) => {
    if (!configured.includes(f)) {
      r.fail(
        'MANIFEST_IP_FAMILY',
        `spec.ipFamilies[${i}]`,
        `Invalid value: "${f}": not configured on this cluster`,
      );
    }
  });
}

function checkRanges(
  r: ObjectReader,
  ips: string[],
  fromList: boolean,
  cidrs?: ServiceCidrs,
): void {
  if (!cidrs) return;
  ips.forEach((ip, i) => {
    const out = clusterIPRangeProblem(ip, cidrs);
    const field = fromList ? `spec.clusterIPs[${i}]` : 'spec.clusterIP';
    if (out) r.fail('MANIFEST_CLUSTER_IP', field, `Invalid value: "${ip}": ${out}`);
  });
}

/** Each defaulted family needs its address: the apiserver would have allocated it, kubetun cannot. */
function allocatedAll(
  r: ObjectReader,
  ips: string[],
  families: IPFamily[],
  cidrs?: ServiceCidrs,
): void {
  for (let i = ips.length; i < families.length; i++) {
    const range = families[i] === 'IPv6' ? cidrs?.v6?.text : cidrs?.v4 && cidrToString(cidrs.v4);
    r.missing(
      `spec.clusterIPs[${i}]`,
      ` (the ${families[i]} ClusterIP of ipFamilies[${i}]; kubetun allocates no ClusterIPs: give one${range ? ` from ${range}` : ''})`,
    );
  }
}
