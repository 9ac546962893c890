// Hash functions the schedulers share, each bit-exact with the code it comes from, because
// "every node builds the same table" and "a flow lands where the kernel would put it" are
// only true if the arithmetic is the same.
//
// - hash32: Linux include/linux/hash.h hash_32() (generic, GOLDEN_RATIO_32, since 4.7), used
//   by ip_vs_sh / ip_vs_dh to pick one of 2^bits buckets from the top bits of a product.
// - jhash3: Linux include/linux/jhash.h jhash_3words() (the 2010+ lookup3 version), which
//   Cilium's bpf/lib/hash.h uses for the Maglev flow hash.
// - murmur3x64_128: MurmurHash3 x64 128-bit (aappleby/smhasher; Cilium pkg/murmur3) over the
//   backend's name, for Maglev offset/skip. BigInt: runs once per backend per table build.

const GOLDEN_RATIO_32 = 0x61c88647;
const JHASH_INITVAL = 0xdeadbeef;

/** hash_32(val, bits): top `bits` bits of val * GOLDEN_RATIO_32 (mod 2^32). */
export function hash32(val: number, bits: number): number {
  return Math.imul(val, GOLDEN_RATIO_32) >>> (32 - bits);
}

function rol32(w: number, s: number): number {
  return (w << s) | (w >>> (32 - s));
}

/** jhash_3words(a, b, c, initval) as unsigned 32 bits. */
export function jhash3(a: number, b: number, c: number, initval: number): number {
  const iv = (initval + JHASH_INITVAL + (3 << 2)) | 0;
  a = (a + iv) | 0;
  b = (b + iv) | 0;
  c = (c + iv) | 0;
  return jhashFinal(a, b, c);
}

/**
 * Cilium's hash_from_tuple_v6 (bpf/lib/hash.h), the Maglev flow hash of an IPv6 packet: the
 * source address's four words through __jhash_mix, then the ports word and the protocol, a
 * second mix, the seed (HASH_INIT6_SEED) and __jhash_final; unsigned 32 bits. `w0..w3` and
 * `ports` as a little-endian node loads the packet's big-endian fields (bswap32 / bswap16), as
 * for hash_from_tuple_v4. Transcribed from Cilium's source, not checked against a Cilium node.
 */
export function jhashTupleV6(
  w0: number,
  w1: number,
  w2: number,
  w3: number,
  ports: number,
  proto: number,
  seed: number,
): number {
  const m = JM;
  m[0] = w0;
  m[1] = w1;
  m[2] = w2;
  jhashMix(m);
  m[0] += w3;
  m[1] += ports;
  m[2] += proto;
  jhashMix(m);
  return jhashFinal((m[0] + seed) | 0, m[1], m[2]);
}

/** a, b, c of __jhash_mix: one preallocated Int32Array, so the mix allocates nothing. */
const JM = new Int32Array(3);

/** __jhash_mix(a, b, c) on m[0..3), in place (int32 wrap-around, as the kernel's u32). */
function jhashMix(m: Int32Array): void {
  let a = m[0];
  let b = m[1];
  let c = m[2];
  a = (a - c) ^ rol32(c, 4);
  c = (c + b) | 0;
  b = (b - a) ^ rol32(a, 6);
  a = (a + c) | 0;
  c = (c - b) ^ rol32(b, 8);
  b = (b + a) | 0;
  a = (a - c) ^ rol32(c, 16);
  c = (c + b) | 0;
  b = (b - a) ^ rol32(a, 19);
  a = (a + c) | 0;
  c = (c - b) ^ rol32(b, 4);
  b = (b + a) | 0;
  m[0] = a;
  m[1] = b;
  m[2] = c;
}

/** __jhash_final(a, b, c): c as unsigned 32 bits. */
function jhashFinal(a: number, b: number, c: number): number {
  c ^= b;
  c = (c - rol32(b, 14)) | 0;
  a ^= c;
  a = (a - rol32(c, 11)) | 0;
  b ^= a;
  b = (b - rol32(a, 25)) | 0;
  c ^= b;
  c = (c - rol32(b, 16)) | 0;
  a ^= c;
  a = (a - rol32(c, 4)) | 0;
  b ^= a;
  b = (b - rol32(a, 14)) | 0;
  c ^= b;
  c = (c - rol32(b, 24)) | 0;
  return c >>> 0;
}

export function bswap32(x: number): number {
  return (((x & 0xff) << 24) | ((x & 0xff00) << 8) | ((x >>> 8) & 0xff00) | (x >>> 24)) >>> 0;
}

export function bswap16(x: number): number {
  return ((x & 0xff) << 8) | ((x >>> 8) & 0xff);
}

const M64 = (1n << 64n) - 1n;
const C1 = 0x87c37b91114253d5n;
const C2 = 0x4cf5ad432745937fn;

function rotl64(x: bigint, r: bigint): bigint {
  return ((x << r) | (x >> (64n - r))) & M64;
}

function fmix64(k: bigint): bigint {
  k ^= k >> 33n;
  k = (k * 0xff51afd7ed558ccdn) & M64;
  k ^= k >> 33n;
  k = (k * 0xc4ceb9fe1a85ec53n) & M64;
  k ^= k >> 33n;
  return k;
}

/** Little-endian u64 from data[off .. off+len) (len <= 8), as the x86 reference reads blocks. */
function le64(data: Uint8Array, off: number, len: number): bigint {
  let v = 0n;
  for (let i = len - 1; i >= 0; i--) v = (v << 8n) | BigInt(data[off + i]);
  return v;
}

function mixK1(k1: bigint): bigint {
  return (rotl64((k1 * C1) & M64, 31n) * C2) & M64;
}

function mixK2(k2: bigint): bigint {
  return (rotl64((k2 * C2) & M64, 33n) * C1) & M64;
}

/** MurmurHash3_x64_128(data, seed) -> [h1, h2]. Slow world only (BigInt). */
export function murmur3x64_128(data: Uint8Array, seed: number): [bigint, bigint] {
  const nblocks = data.length >>> 4;
  let h1 = BigInt(seed >>> 0);
  let h2 = h1;
  for (let i = 0; i < nblocks; i++) {
    h1 ^= mixK1(le64(data, i * 16, 8));
    h1 = (rotl64(h1, 27n) + h2) & M64;
    h1 = (h1 * 5n + 0x52dce729n) & M64;
    h2 ^= mixK2(le64(data, i * 16 + 8, 8));
    h2 = (rotl64(h2, 31n) + h1) & M64;
    h2 = (h2 * 5n + 0x38495ab5n) & M64;
  }
  const tail = nblocks * 16;
  const rest = data.length & 15;
  if (rest > 8) h2 ^= mixK2(le64(data, tail + 8, rest - 8));
  if (rest > 0) h1 ^= mixK1(le64(data, tail, Math.min(rest, 8)));
  const len = BigInt(data.length);
  h1 ^= len;
  h2 ^= len;
  h1 = (h1 + h2) & M64;
  h2 = (h2 + h1) & M64;
  h1 = fmix64(h1);
  h2 = fmix64(h2);
  h1 = (h1 + h2) & M64;
  h2 = (h2 + h1) & M64;
  return [h1, h2];
}
