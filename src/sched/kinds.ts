// Scheduler kinds: the numbers stored per service and the names users write in the
// `kubetun.io/scheduler` annotation. Names are ipvsadm's (`-s rr|wrr|lc|...`) plus `random`
// (kube-proxy's iptables mode, `statistic --mode random`) and `maglev` (Cilium's
// `--bpf-lb-algorithm=maglev`; IPVS calls its Maglev scheduler `mh`, accepted as an alias).

export const SCHED_RANDOM = 0;
export const SCHED_RR = 1;
export const SCHED_WRR = 2;
export const SCHED_LC = 3;
export const SCHED_WLC = 4;
export const SCHED_SED = 5;
export const SCHED_NQ = 6;
export const SCHED_SH = 7;
export const SCHED_DH = 8;
export const SCHED_MAGLEV = 9;

/** Indexed by kind. */
export const SCHED_NAMES: readonly string[] = [
  'random',
  'rr',
  'wrr',
  'lc',
  'wlc',
  'sed',
  'nq',
  'sh',
  'dh',
  'maglev',
];

/** The annotation that selects a service's scheduler. */
export const SCHED_ANNOTATION = 'kubetun.io/scheduler';

/** Annotation value -> kind. Throws on anything else (control plane only). */
export function schedulerFromName(name: string): number {
  const k = SCHED_NAMES.indexOf(name === 'mh' ? 'maglev' : name);
  if (k < 0) {
    throw new Error(
      `unknown scheduler ${JSON.stringify(name)}: expected one of ${SCHED_NAMES.join(', ')} (or mh)`,
    );
  }
  return k;
}

export function schedulerName(kind: number): string {
  const n = SCHED_NAMES[kind];
  if (n === undefined) throw new Error(`unknown scheduler kind ${kind}`);
  return n;
}

/**
 * What the random scheduler needs from a PRNG. The datapath's `Rng` (src/datapath/rng.ts)
 * fits as is: uniform integer in [0, n).
 */
export interface SchedRng {
  below(n: number): number;
}
