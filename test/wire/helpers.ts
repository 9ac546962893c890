// Test helpers for the wire formats.

/**
 * Copy `pkt` into a larger buffer at an odd offset, guarded by 0xAA filler on both sides, and
 * return a subarray view on it: the undici / Deno std bug (a view built on `x.buffer` that
 * ignored `byteOffset`) shows up as wrong bytes read or bytes written into the guard.
 */
export function oddView(pkt: Uint8Array, lead = 13, trail = 11): Uint8Array {
  const big = new Uint8Array(lead + pkt.length + trail).fill(0xaa);
  big.set(pkt, lead);
  return big.subarray(lead, lead + pkt.length);
}

/** The whole backing store of a view from oddView, to check the guards are intact. */
export function guardsIntact(view: Uint8Array): boolean {
  const all = new Uint8Array(view.buffer);
  for (let i = 0; i < view.byteOffset; i++) if (all[i] !== 0xaa) return false;
  for (let i = view.byteOffset + view.length; i < all.length; i++) if (all[i] !== 0xaa) return false;
  return true;
}

/** Deterministic PRNG (mulberry32), so randomized tests replay exactly. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function hex(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.length).toString('hex');
}
