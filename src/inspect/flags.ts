// CLI flags -> the filter the agent applies, validated on this side first so a typo fails
// before anything is sent (and names the flag, not the JSON key).
import { UsageError } from '../errors.ts';
import { type CtFilterSpec, parseCtFilter } from './ct-filter.ts';

/** JSON key -> the flag that sets it. */
export const CT_FILTER_FLAGS: Record<keyof CtFilterSpec, string> = {
  src: '--src',
  dst: '--dst',
  replySrc: '--reply-src',
  replyDst: '--reply-dst',
  proto: '--proto',
  state: '--state',
  sport: '--sport',
  dport: '--dport',
  family: '--family',
};

/** commander's option values -> a validated filter spec (only the flags given). */
export function ctFilterFromFlags(o: Record<string, unknown>): CtFilterSpec {
  const spec: Record<string, unknown> = {};
  for (const key of Object.keys(CT_FILTER_FLAGS)) {
    if (o[key] !== undefined) spec[key] = o[key];
  }
  try {
    parseCtFilter(spec, 'filter', (k) => CT_FILTER_FLAGS[k as keyof CtFilterSpec] ?? k);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  return spec as CtFilterSpec;
}
