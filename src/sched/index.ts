// Backend schedulers: IPVS's (rr, wrr, lc, wlc, sed, nq, sh, dh), Cilium's Maglev and
// iptables-mode random, as standalone functions over typed arrays plus a per-service table.
//
// Integration, in the datapath's terms:
//   control plane (load):  kind = schedulerFromName(svc.annotations[SCHED_ANNOTATION] ?? 'random')
//                          sched.set(revNat, kind, backends in slot order:
//                                    { id, weight, addr, port, proto })   // addr/port/proto name
//                                                                          // Maglev backends
//                          sched.delete(revNat) when the frontend goes
//   new flow (per packet): i = sched.pick(revNat, saddr, daddr, sport, dport, proto, dp.rng)
//                          i < 0: no backend (reject as for an empty service); else slot i + 1,
//                          or sched.pickId(...) for the backend id directly
//   conntrack events:      sched.connAdjust(revNat, backendId, dActive, dInactive) on create,
//                          on TCP established/closing and on expiry (lc, wlc, sed, nq read them)

export * from './hash.ts';
export * from './hashing.ts';
export * from './kinds.ts';
export * from './lc.ts';
export * from './maglev.ts';
export * from './rr.ts';
export * from './table.ts';
export * from './wrr.ts';
