// The comparison proper: per capture point, are the two normalised packet sequences the same,
// and if not, where do they first part? Order matters (a data plane that answers before the
// backend did is wrong even with the same packets), so this is a sequence compare, not a set one.
import type { NPkt } from './normalise.ts';

export interface PointDiff {
  point: string;
  same: boolean;
  /** not the same, but only in documented deliberate ways (NPkt.loose equal everywhere) */
  deliberate: boolean;
  /** index of the first packet that differs (or where one side ends), -1 when same */
  firstDiff: number;
  a: NPkt[];
  b: NPkt[];
}

export function diffPoint(point: string, a: NPkt[], b: NPkt[]): PointDiff {
  const n = Math.max(a.length, b.length);
  let firstDiff = -1;
  let deliberate = true;
  for (let i = 0; i < n; i++) {
    if (a[i]?.text === b[i]?.text) continue;
    if (firstDiff < 0) firstDiff = i;
    if (a[i] === undefined || b[i] === undefined || a[i]!.loose !== b[i]!.loose) deliberate = false;
  }
  if (firstDiff < 0) return { point, same: true, deliberate: false, firstDiff, a, b };
  return { point, same: false, deliberate, firstDiff, a, b };
}

/** Diffs two runs point by point; a point missing on one side counts as an empty capture. */
export function diffRuns(
  a: readonly { name: string; packets: NPkt[] }[],
  b: readonly { name: string; packets: NPkt[] }[],
): PointDiff[] {
  const names = [...new Set([...a.map((p) => p.name), ...b.map((p) => p.name)])];
  const get = (r: typeof a, name: string) => r.find((p) => p.name === name)?.packets ?? [];
  return names.map((name) => diffPoint(name, get(a, name), get(b, name)));
}

/**
 * The first difference as text, packet by packet: the packets before it once (they match), then
 * both sides from the first difference on, `-` for the first run and `+` for the second.
 */
export function formatPointDiff(
  d: PointDiff,
  labelA: string,
  labelB: string,
  context = 2,
): string[] {
  if (d.same) return [`  ${d.point}: ${d.a.length} packets, same`];
  const what = d.deliberate ? 'DELIBERATE DIFFERENCE (ICMP error source/TTL)' : 'DIFFERENT';
  const out = [
    `  ${d.point}: ${what} from packet ${d.firstDiff + 1} (${labelA} ${d.a.length} packets, ${labelB} ${d.b.length})`,
  ];
  for (let i = Math.max(0, d.firstDiff - context); i < d.firstDiff; i++)
    out.push(`      ${i + 1}  ${d.a[i]!.text}`);
  const end = Math.max(d.a.length, d.b.length);
  for (let i = d.firstDiff; i < Math.min(end, d.firstDiff + 4); i++) {
    out.push(`    - ${i + 1}  ${d.a[i]?.text ?? '(no packet)'}    [${labelA}]`);
    out.push(`    + ${i + 1}  ${d.b[i]?.text ?? '(no packet)'}    [${labelB}]`);
  }
  if (end > d.firstDiff + 4) out.push(`      … ${end - d.firstDiff - 4} more`);
  return out;
}
