// Verdicts: what the caller (the TUN loop, the pcap replayer, a test) does with the packet after
// dpProcess returns. Numbers, not objects, so the per-packet path never allocates.

/** Unchanged: write the packet back as it is. */
export const V_PASS = 0;
/** Rewritten in place (DNAT / reverse NAT): write the packet back. */
export const V_TX = 1;
/** The original is consumed; a generated packet is in `dp.out[0..dp.outLen)`: write that instead. */
export const V_REPLY = 2;
/** Discard; `dp.lastReason` says why and its counter was bumped. */
export const V_DROP = 3;

export const VERDICT_NAMES: readonly string[] = ['PASS', 'TX', 'REPLY', 'DROP'];
