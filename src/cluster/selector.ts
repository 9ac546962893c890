// Label selectors, as the API machinery evaluates them (k8s.io/apimachinery/pkg/labels).
//
//   Service spec.selector          a plain map: every key present with exactly that value
//   LabelSelector (Deployment ...) matchLabels (as above) AND every matchExpressions entry:
//       In [v...]       key present, value in the set
//       NotIn [v...]    key absent, or value not in the set
//       Exists          key present (any value)
//       DoesNotExist    key absent
//   -l "a=b,c!=d,e,!f,g in (x,y),h notin (z)"   kubectl's string form, parsed into a LabelSelector
//
// An empty selector matches everything (labels.SelectorFromSet of an empty set is Everything; so
// is an empty metav1.LabelSelector). Whether a Service *has* a selector is the caller's decision:
// the EndpointSlice controller leaves Services without one (nil or empty) alone.
import { UserError } from '../errors.ts';
import type { LabelSelector, LabelSelectorRequirement } from './types.ts';

export type Labels = Readonly<Record<string, string>> | undefined;

/** Whether `labels` satisfy a Service selector map or a LabelSelector. */
export function matchesSelector(
  labels: Labels,
  selector: Readonly<Record<string, string>> | LabelSelector | undefined,
): boolean {
  if (selector === undefined) return true;
  if (isLabelSelector(selector)) {
    const s = selector as LabelSelector;
    if (!matchesMap(labels, s.matchLabels)) return false;
    return (s.matchExpressions ?? []).every((r) => matchesRequirement(labels, r));
  }
  return matchesMap(labels, selector as Record<string, string>);
}

/** A LabelSelector has only matchLabels / matchExpressions keys, with non-string values. */
function isLabelSelector(s: object): boolean {
  const keys = Object.keys(s);
  if (keys.length === 0) return false;
  return keys.every(
    (k) =>
      (k === 'matchLabels' || k === 'matchExpressions') &&
      typeof (s as Record<string, unknown>)[k] !== 'string',
  );
}

function matchesMap(labels: Labels, want: Readonly<Record<string, string>> | undefined): boolean {
  if (!want) return true;
  for (const [k, v] of Object.entries(want)) {
    if (labels === undefined || !Object.hasOwn(labels, k) || labels[k] !== v) return false;
  }
  return true;
}

export function matchesRequirement(labels: Labels, r: LabelSelectorRequirement): boolean {
  const has = labels !== undefined && Object.hasOwn(labels, r.key);
  const value = has ? labels[r.key] : undefined;
  switch (r.operator) {
    case 'In':
      return has && (r.values ?? []).includes(value as string);
    case 'NotIn':
      return !has || !(r.values ?? []).includes(value as string);
    case 'Exists':
      return has;
    case 'DoesNotExist':
      return !has;
    default:
      // An operator the API would have refused at admission; match nothing rather than all.
      return false;
  }
}

export class SelectorError extends UserError {
  constructor(selector: string, reason: string) {
    super('SELECTOR_SYNTAX', `invalid selector "${selector}": ${reason}`);
    this.name = 'SelectorError';
  }
}

// One requirement: key, optional "!" prefix, operator, value(s). Keys may hold a DNS prefix
// ("app.kubernetes.io/name"); values are label values (may be empty after "=").
const KEY = '[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?';
const VALUE = '([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?';
const EQUALITY = new RegExp(`^(${KEY})\\s*(==|=|!=)\\s*(${VALUE})$`);
const EXISTS = new RegExp(`^(!?)\\s*(${KEY})$`);
const SET = new RegExp(`^(${KEY})\\s+(in|notin)\\s*\\(([^()]*)\\)$`);
const VALUE_ONLY = new RegExp(`^${VALUE}$`);

/** kubectl's `-l` syntax → LabelSelector. Throws SelectorError naming the bad term. */
export function parseSelector(text: string): LabelSelector {
  const expressions: LabelSelectorRequirement[] = [];
  for (const term of splitTerms(text)) {
    expressions.push(parseTerm(text, term));
  }
  return expressions.length === 0 ? {} : { matchExpressions: expressions };
}

/** Splits on commas outside parentheses ("a in (x,y),b" → ["a in (x,y)", "b"]). */
function splitTerms(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of text) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (depth < 0) throw new SelectorError(text, 'unbalanced ")"');
    if (ch === ',' && depth === 0) {
      out.push(cur.trim());
      cur = '';
    } else cur += ch;
  }
  if (depth !== 0) throw new SelectorError(text, 'unbalanced "("');
  out.push(cur.trim());
  if (out.length === 1 && out[0] === '') return [];
  for (const t of out) if (t === '') throw new SelectorError(text, 'empty term between commas');
  return out;
}

function parseTerm(text: string, term: string): LabelSelectorRequirement {
  let m = EQUALITY.exec(term);
  if (m) {
    const key = m[1];
    const value = m[4];
    return { key, operator: m[3] === '!=' ? 'NotIn' : 'In', values: [value] };
  }
  m = SET.exec(term);
  if (m) {
    const values = m[4].split(',').map((v) => v.trim());
    for (const v of values) {
      if (!VALUE_ONLY.test(v)) throw new SelectorError(text, `"${v}" is not a label value`);
    }
    return { key: m[1], operator: m[3] === 'in' ? 'In' : 'NotIn', values };
  }
  m = EXISTS.exec(term);
  if (m) return { key: m[2], operator: m[1] === '!' ? 'DoesNotExist' : 'Exists' };
  throw new SelectorError(
    text,
    `cannot parse "${term}" (expected key=value, key!=value, key, !key, key in (a,b))`,
  );
}
