// The probability ladder: kube-proxy writes `fmt.Sprintf("%0.10f", 1.0/float64(n))` for the
// n-th-from-last endpoint. Go formats the exact binary value of the float64 and breaks exact
// ties to even; JavaScript's toFixed breaks ties upwards. 1/2048 = 0.00048828125 is such a
// tie, so toFixed would print ...813 where kube-proxy prints ...812. Do it exactly.

const TEN_POW_10 = 10n ** 10n;

/** Exact value of a finite float64 as numerator / 2^shift. */
function exactBinary(x: number): { num: bigint; shift: bigint } {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const hi = view.getUint32(0);
  const lo = view.getUint32(4);
  const biasedExp = (hi >>> 20) & 0x7ff;
  const mantHi = BigInt(hi & 0xfffff);
  let mant = (mantHi << 32n) | BigInt(lo);
  let exp: number;
  if (biasedExp === 0) {
    exp = -1074;
  } else {
    mant |= 1n << 52n;
    exp = biasedExp - 1075;
  }
  if (exp >= 0) return { num: mant << BigInt(exp), shift: 0n };
  return { num: mant, shift: BigInt(-exp) };
}

/** Go's `%0.10f` for a non-negative finite number (round half to even on the exact value). */
export function formatFixed10(x: number): string {
  if (!Number.isFinite(x) || x < 0) throw new RangeError(`formatFixed10: unsupported ${x}`);
  const { num, shift } = exactBinary(x);
  const scaled = num * TEN_POW_10;
  const denom = 1n << shift;
  let q = scaled / denom;
  const twiceRem = (scaled % denom) * 2n;
  if (twiceRem > denom || (twiceRem === denom && q % 2n === 1n)) q += 1n;
  const digits = q.toString().padStart(11, '0');
  return `${digits.slice(0, -10)}.${digits.slice(-10)}`;
}

/** kube-proxy's computeProbability(n): the chance to pick this endpoint of the n remaining. */
export function computeProbability(n: number): string {
  return formatFixed10(1.0 / n);
}
