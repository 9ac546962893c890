// Backend schedulers: IPVS's (rr, wrr, lc, wlc, sed, nq, sh, dh), Cilium's Maglev and
// iptables-mode random, as standalone functions over typed arrays plus a per-service table.

export * from './hash.ts';
export * from './hashing.ts';
export * from './kinds.ts';
export * from './lc.ts';
export * from './maglev.ts';
export * from './rr.ts';
export * from './table.ts';
export * from './wrr.ts';
