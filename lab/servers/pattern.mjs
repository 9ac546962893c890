// The deterministic byte stream behind GET /bytes?n=N: xorshift32 words, little-endian, from a
// fixed seed. Not periodic within 2^32 - 1 words, so a reordered, duplicated or corrupted
// segment anywhere in a 100 MB transfer changes the checksum. Shared by the pod server and the
// tests that compute the expected sha256 locally.

export const PATTERN_SEED = 0x9e3779b9;

/** A generator state to pass to fillPattern; starts the stream at byte 0. */
export function patternState() {
  return { x: PATTERN_SEED };
}

/** Fills buf (length a multiple of 4) with the next bytes of the stream. */
export function fillPattern(state, buf) {
  const words = new Uint32Array(buf.buffer, buf.byteOffset, buf.byteLength >>> 2);
  let x = state.x;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    words[i] = x;
  }
  state.x = x;
}

/** Calls onChunk with consecutive pieces of the first n bytes of the stream. */
export function* patternChunks(n, chunkSize = 65536) {
  const state = patternState();
  let left = n;
  while (left > 0) {
    const buf = new Uint8Array(chunkSize);
    fillPattern(state, buf);
    const take = Math.min(left, chunkSize);
    yield take === chunkSize ? buf : buf.subarray(0, take);
    left -= take;
  }
}
