// Big-endian field access shared by the wire formats. Plain index arithmetic on the Uint8Array
// the caller passed (never on `.buffer`, which would ignore byteOffset — the undici/Deno bug);
// no DataView per packet.

export function read16(buf: Uint8Array, at: number): number {
  return (buf[at] << 8) | buf[at + 1];
}

/** Unsigned: `>>> 0` keeps values >= 2^31 positive. */
export function read32(buf: Uint8Array, at: number): number {
  return ((buf[at] << 24) | (buf[at + 1] << 16) | (buf[at + 2] << 8) | buf[at + 3]) >>> 0;
}

/**
 * Signed (`| 0`): the fast path's representation of addresses. An int32 is a small integer in
 * V8 (no pointer compression on node), so it never becomes a heap number crossing a call.
 */
export function read32s(buf: Uint8Array, at: number): number {
  return (buf[at] << 24) | (buf[at + 1] << 16) | (buf[at + 2] << 8) | buf[at + 3];
}

export function write16(buf: Uint8Array, at: number, v: number): void {
  buf[at] = v >>> 8;
  buf[at + 1] = v;
}

export function write32(buf: Uint8Array, at: number, v: number): void {
  buf[at] = v >>> 24;
  buf[at + 1] = v >>> 16;
  buf[at + 2] = v >>> 8;
  buf[at + 3] = v;
}
