// V8 tuning for the per-packet path, opt-in: call dpTuneV8() once at process start, before any
// packet is processed (the agent, the benchmark).
//
// Why: TurboFan stops inlining into one optimised function once the inlined bytecode reaches
// --max-inlined-bytecode-size-cumulative (920 by default). The ClusterIP program is many small
// functions (parse, conntrack, map lookups, rewrites, checksums) called from dpProcess; with the
// default budget a dozen of them stay real calls. scripts/bench-datapath.ts measured on this
// project's 2-CPU VM, established flows: ~4.5-4.8 Mpps per CPU-second at 920, ~5.7-6.7 at
// 3000-4000 (the "--no-v8-tune" switch there shows the difference). More is not better:
// callgrind's instructions per packet (bench:datapath --count instructions, on c341a0c) rose at
// 6000 to 3148 for established revNAT (2790 at 4000) and at 8000 to 2886 for DNAT (2779), the
// loop's compile then inlining ~4500 bytes, near V8's absolute cap (4600). It changes only
// inlining decisions, not semantics; node documents that flags set after start "may simply do
// nothing", in which case the cost is nothing.
// 4400, not 4000, since the IPv6 program: the bytecode V8 weighs in the IPv4 loop grew (dpProcess
// 214 -> 309 bytes with the version test and the dispatch, each conntrack lookup a per-family
// lookup plus a shared hit rule, +24 each), and at 4000 the established revNAT loop left as calls
// two hash steps (mmStep) of the reply lookup and the SYN-ACK check (ct4AnswersAnother) that it
// inlined before (`node --trace-turbo-inlining` of scripts/bench/count-child.ts); new flows
// left more hash steps as calls. Callgrind (bench:datapath --count instructions), 1000
// services, 4000 -> 4400: revNAT 2783.4 -> 2651.5 instructions per packet, new flows 6190.3 ->
// 5918.8, DNAT 2563.8 either way (the same inlining); IPv6 DNAT 3976.7 -> 3821.2, revNAT
// 4605.1 -> 4418.7, new flows 4263.7 -> 4193.7. 4800: DNAT 2659.8, worse (its loop also inlines
// the reply lookup and nat4Reply, cold there), revNAT 2652.5.

import { setFlagsFromString } from 'node:v8';

/** Default cumulative inlining budget set by dpTuneV8 (bytes of bytecode). */
export const DP_V8_INLINE_BUDGET = 4400;

let tuned = false;

/** Raise V8's cumulative inlining budget for the datapath's hot loop. Idempotent. */
export function dpTuneV8(budget: number = DP_V8_INLINE_BUDGET): void {
  if (!Number.isInteger(budget) || budget < 920 || budget > 100_000) {
    throw new RangeError(`dpTuneV8: budget must be an integer in 920..100000, got ${budget}`);
  }
  if (tuned) return;
  setFlagsFromString(`--max-inlined-bytecode-size-cumulative=${budget}`);
  tuned = true;
}
