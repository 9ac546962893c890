// nftables mode: not rendered yet.
import type { ResolvedServicePort } from '../model.ts';
import type { RulesOptions } from './options.ts';

export function renderNftables(
  _ports: readonly ResolvedServicePort[],
  _opts: RulesOptions = {},
): string {
  throw new RangeError('nftables mode is not implemented yet');
}
