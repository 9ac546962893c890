// A fast reader for the YAML manifests are nearly always written in, beside the `yaml` package.
//
// Contract: fastYamlValues(text) returns exactly the values yamlValues' general path returns
// (yaml 2.x, YAML 1.2 core schema, toJS: plain objects, numbers, no aliases) — or undefined as
// soon as the text steps outside the subset below, and then the `yaml` package reads the whole
// text (and names any error's line and column). It never reports an error itself: anything it
// does not understand, including every error and every key given twice, falls back. A seeded
// differential test (test/manifests/yaml-fast.test.ts) holds it to the package on hand-written
// edge cases and mutated manifests.
//
// Why (issue 18): the package builds a full AST with source ranges, comments and tags for every
// node; 10k Services took ~3.3 s of its parsing (plus ~1 s of GC) in the manifest worker, the
// whole budget of "10k Services into the maps in 1 s" three times over.
//
// The subset, line by line:
//   - printable ASCII and '\n' only (no tab, CR, BOM, non-ASCII: those fall back)
//   - `---` document markers (alone, or with a comment); no `...`, no `%` directives
//   - block mappings `key: value` whose keys are plain [A-Za-z0-9._/-] strings (not null,
//     bool or numbers) or one-line quoted strings; block sequences `- x`, compact `- k: v` and
//     `- - x`; a mapping's sequence value at the mapping's own indentation
//   - one-line values: plain scalars (core schema: null, bool, int, float, string), single-
//     and double-quoted strings, flow collections `[...]`, `{...}` closed on the same line
//   - comments: whole lines, or after whitespace
//   - not: block scalars `|` `>`, anchors, aliases, tags, `?` keys, multi-line scalars or flow
//     collections, empty flow entries or values, keys over 1000 characters

/** Thrown inside, caught at the top: the text is outside the subset. */
const BAIL = Symbol('outside the fast YAML subset');
function bail(): never {
  throw BAIL;
}

/** Any character outside printable ASCII and '\n'. */
const OUTSIDE = /[^\n\x20-\x7e]/;
/** Nesting deeper than this falls back (and keeps recursion shallow). */
const MAX_DEPTH = 64;
/** YAML limits an implicit key to 1024 characters; the package enforces it, so stay clear. */
const MAX_KEY = 1000;

const SP = 32;
const HASH = 35;
const DASH = 45;
const COLON = 58;
const COMMA = 44;
const SQUOTE = 39;
const DQUOTE = 34;
const LBRACKET = 91;
const RBRACKET = 93;
const LBRACE = 123;
const RBRACE = 125;

/** Characters of a plain key: what Kubernetes keys, labels and annotations are made of. */
const KEY_CHAR = new Uint8Array(128);
for (const c of 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/-')
  KEY_CHAR[c.charCodeAt(0)] = 1;
/** Characters that cannot start a plain scalar here (YAML indicators, and `-`/`?`/`:` too). */
const NOT_PLAIN_START = new Uint8Array(128);
for (const c of '-?:,[]{}#&*!|>\'"%@`') NOT_PLAIN_START[c.charCodeAt(0)] = 1;

/**
 * The YAML documents of `text` as plain values (null for an empty document), or undefined when
 * the text is outside the subset (see the header).
 */
export function fastYamlValues(text: string): unknown[] | undefined {
  if (OUTSIDE.test(text)) return undefined;
  try {
    return documents(text);
  } catch (e) {
    if (e === BAIL) return undefined;
    throw e;
  }
}

/** One document's content lines: indentation and the text after it (blank/comment lines gone). */
class Lines {
  ind: number[] = [];
  txt: string[] = [];
  i = 0;
  get done(): boolean {
    return this.i >= this.ind.length;
  }
}

function documents(text: string): unknown[] {
  const docs: unknown[] = [];
  let cur = new Lines();
  let open = false; // a document has begun (a marker or content)
  const n = text.length;
  for (let start = 0; start < n; ) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = n;
    let k = start;
    while (k < end && text.charCodeAt(k) === SP) k++;
    if (k < end && text.charCodeAt(k) !== HASH) {
      const c = text.charCodeAt(start);
      if (
        k === start &&
        (c === DASH || c === 46 /* . */ || c === 37) /* % */ &&
        special(text, start, end)
      ) {
        if (open) docs.push(documentValue(cur));
        cur = new Lines();
        open = true;
      } else {
        cur.ind.push(k - start);
        cur.txt.push(text.slice(k, end));
        open = true;
      }
    }
    start = end + 1;
  }
  if (open) docs.push(documentValue(cur));
  return docs;
}

/** A line at column 0 starting with `-`, `.` or `%`: true for a `---` marker, bail for `...`/`%`. */
function special(text: string, start: number, end: number): boolean {
  if (text.startsWith('---', start)) {
    if (end === start + 3) return true;
    if (text.charCodeAt(start + 3) !== SP) bail(); // `---x`: a plain scalar, or worse
    let k = start + 3;
    while (k < end && text.charCodeAt(k) === SP) k++;
    if (k === end || text.charCodeAt(k) === HASH) return true;
    bail(); // content on the marker line
  }
  if (text.charCodeAt(start) !== DASH) bail(); // `...`, `%` directives
  return false; // `- item` or `-1`
}

function documentValue(p: Lines): unknown {
  if (p.ind.length === 0) return null;
  const v = block(p, p.ind[0], 0);
  if (!p.done) bail();
  return v;
}

function isSeqEntry(t: string): boolean {
  return t.charCodeAt(0) === DASH && (t.length === 1 || t.charCodeAt(1) === SP);
}

/** The block node starting at line p.i, at that line's indentation n. */
function block(p: Lines, n: number, depth: number): unknown {
  if (depth > MAX_DEPTH) bail();
  if (isSeqEntry(p.txt[p.i])) return sequence(p, n, depth);
  return mapping(p, n, depth);
}

function sequence(p: Lines, n: number, depth: number): unknown[] {
  const out: unknown[] = [];
  while (!p.done && p.ind[p.i] === n && isSeqEntry(p.txt[p.i])) {
    const t = p.txt[p.i];
    let k = 1;
    while (k < t.length && t.charCodeAt(k) === SP) k++;
    if (k === t.length || t.charCodeAt(k) === HASH) {
      p.i++;
      out.push(nested(p, n, depth));
      continue;
    }
    // compact: the rest of the line is a node at column n + k (rewritten in place)
    p.ind[p.i] = n + k;
    p.txt[p.i] = t.slice(k);
    out.push(inline(p, n, n + k, depth + 1));
  }
  if (!p.done && p.ind[p.i] > n) bail();
  return out;
}

/** The value of `key:` or `-` with nothing after it: a more indented block, or null. */
function nested(p: Lines, parent: number, depth: number): unknown {
  if (p.done || p.ind[p.i] <= parent) return null;
  return block(p, p.ind[p.i], depth + 1);
}

/** A sequence entry's content on its own line: a compact sequence, mapping, or one-line value. */
function inline(p: Lines, parent: number, col: number, depth: number): unknown {
  if (depth > MAX_DEPTH) bail();
  const t = p.txt[p.i];
  if (isSeqEntry(t)) return sequence(p, col, depth);
  if (keyEnd(t) >= 0) return mapping(p, col, depth);
  const v = lineValue(t, 0, depth);
  p.i++;
  if (!p.done && p.ind[p.i] > parent) bail(); // a multi-line scalar, or an error
  return v;
}

function mapping(p: Lines, n: number, depth: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  while (!p.done && p.ind[p.i] === n) {
    const t = p.txt[p.i];
    if (isSeqEntry(t)) bail(); // `- x` among a mapping's keys: an error
    const [key, rest] = keyLine(t);
    let v: unknown;
    if (rest === t.length || t.charCodeAt(rest) === HASH) {
      p.i++;
      if (!p.done && p.ind[p.i] === n && isSeqEntry(p.txt[p.i])) v = sequence(p, n, depth + 1);
      else v = nested(p, n, depth);
    } else {
      v = lineValue(t, rest, depth);
      p.i++;
      if (!p.done && p.ind[p.i] > n) bail(); // a multi-line scalar, or an error
    }
    put(out, key, v);
  }
  if (!p.done && p.ind[p.i] > n) bail();
  return out;
}

/** As yaml's toJS: own properties, `__proto__` and the like defined rather than assigned. */
function put(o: Record<string, unknown>, key: string, v: unknown): void {
  if (Object.hasOwn(o, key)) bail(); // a key given twice: the general path names its line
  if (key in o)
    Object.defineProperty(o, key, {
      value: v,
      writable: true,
      enumerable: true,
      configurable: true,
    });
  else o[key] = v;
}

/** Where a plain key's `: ` (or final `:`) is, or -1 when the line is no plain key. */
function keyEnd(t: string): number {
  const len = t.length;
  const c0 = t.charCodeAt(0);
  if (c0 === SQUOTE || c0 === DQUOTE) {
    const [, e] = quoted(t, 0);
    let k = e;
    while (k < len && t.charCodeAt(k) === SP) k++;
    return k < len && t.charCodeAt(k) === COLON && (k + 1 === len || t.charCodeAt(k + 1) === SP)
      ? k
      : -1;
  }
  for (let k = 0; k < len && k <= MAX_KEY; k++) {
    const c = t.charCodeAt(k);
    if (c === COLON) {
      if (k + 1 === len || t.charCodeAt(k + 1) === SP) return k;
    } else if (c === HASH && k > 0 && t.charCodeAt(k - 1) === SP) return -1;
  }
  return -1;
}

/** A `key: ...` line: the key, and where its value starts (after the spaces). */
function keyLine(t: string): [string, number] {
  const len = t.length;
  let key: string;
  let k: number;
  const c0 = t.charCodeAt(0);
  if (c0 === SQUOTE || c0 === DQUOTE) {
    const [s, e] = quoted(t, 0);
    if (e > MAX_KEY) bail();
    key = s;
    k = e;
  } else {
    k = 0;
    while (k < len && KEY_CHAR[t.charCodeAt(k)] === 1) k++;
    if (k === 0 || k > MAX_KEY || NOT_PLAIN_START[c0] === 1) bail();
    key = t.slice(0, k);
    if (typeof plain(key) !== 'string') bail(); // `80:`, `true:`, `~:` are not string keys
  }
  while (k < len && t.charCodeAt(k) === SP) k++;
  if (k >= len || t.charCodeAt(k) !== COLON) bail();
  k++;
  if (k < len && t.charCodeAt(k) !== SP) bail();
  while (k < len && t.charCodeAt(k) === SP) k++;
  return [key, k];
}

/** The one-line value at t[i..]: a flow collection, a quoted string or a plain scalar. */
function lineValue(t: string, i: number, depth: number): unknown {
  const c = t.charCodeAt(i);
  if (c === LBRACKET || c === LBRACE || c === SQUOTE || c === DQUOTE) {
    const [v, e] = c === SQUOTE || c === DQUOTE ? quoted(t, i) : flow(t, i, depth + 1);
    lineEnd(t, e);
    return v;
  }
  if (NOT_PLAIN_START[c] === 1 && !(c === DASH && i + 1 < t.length && t.charCodeAt(i + 1) !== SP))
    bail();
  let e = t.length;
  for (let k = i; k < t.length; k++) {
    const ch = t.charCodeAt(k);
    if (ch === HASH && t.charCodeAt(k - 1) === SP) {
      e = k;
      break;
    }
    if (ch === COLON && (k + 1 === t.length || t.charCodeAt(k + 1) === SP)) bail(); // `a: b: c`
  }
  while (e > i && t.charCodeAt(e - 1) === SP) e--;
  return plain(t.slice(i, e));
}

/** After a closed value only spaces, then a comment or the end of the line. */
function lineEnd(t: string, e: number): void {
  let k = e;
  while (k < t.length && t.charCodeAt(k) === SP) k++;
  if (k === t.length) return;
  if (k > e && t.charCodeAt(k) === HASH) return;
  bail();
}

/** A flow collection at s[i] ('[' or '{'), closed on this line: its value and the index after. */
function flow(s: string, i: number, depth: number): [unknown, number] {
  if (depth > MAX_DEPTH) bail();
  const close = s.charCodeAt(i) === LBRACKET ? RBRACKET : RBRACE;
  const seq: unknown[] = [];
  const map: Record<string, unknown> = {};
  let k = skip(s, i + 1);
  if (s.charCodeAt(k) === close) return [close === RBRACKET ? seq : map, k + 1];
  for (;;) {
    if (close === RBRACKET) {
      const [v, e] = flowNode(s, k, depth);
      k = skip(s, e);
      if (s.charCodeAt(k) === COLON) bail(); // `[a: b]`, a one-pair mapping
      seq.push(v);
    } else {
      let key: string;
      const c = s.charCodeAt(k);
      if (c === SQUOTE || c === DQUOTE) {
        const [q, e] = quoted(s, k);
        if (e - k > MAX_KEY) bail();
        key = q;
        k = skip(s, e);
        if (s.charCodeAt(k) !== COLON) bail();
        k++;
      } else {
        const st = k;
        while (k < s.length && KEY_CHAR[s.charCodeAt(k)] === 1) k++;
        if (k === st || k - st > MAX_KEY || NOT_PLAIN_START[c] === 1) bail();
        key = s.slice(st, k);
        if (typeof plain(key) !== 'string') bail();
        if (s.charCodeAt(k) !== COLON || s.charCodeAt(k + 1) !== SP) bail();
        k++;
      }
      k = skip(s, k);
      const [v, e] = flowNode(s, k, depth);
      k = skip(s, e);
      put(map, key, v);
    }
    const c = s.charCodeAt(k);
    if (c === close) return [close === RBRACKET ? seq : map, k + 1];
    if (c !== COMMA) bail();
    k = skip(s, k + 1);
    if (s.charCodeAt(k) === close) return [close === RBRACKET ? seq : map, k + 1];
  }
}

function skip(s: string, i: number): number {
  while (i < s.length && s.charCodeAt(i) === SP) i++;
  return i;
}

/** One node inside a flow collection: a nested collection, a quoted string or a plain scalar. */
function flowNode(s: string, i: number, depth: number): [unknown, number] {
  const c = s.charCodeAt(i);
  if (c === LBRACKET || c === LBRACE) return flow(s, i, depth + 1);
  if (c === SQUOTE || c === DQUOTE) return quoted(s, i);
  if (i >= s.length || NOT_PLAIN_START[c] === 1) bail(); // empty entries, `-x`, indicators
  let e = i;
  for (; e < s.length; e++) {
    const ch = s.charCodeAt(e);
    if (ch === COMMA || ch === RBRACKET || ch === RBRACE) break;
    if (ch === COLON || ch === HASH || ch === LBRACKET || ch === LBRACE) bail();
  }
  let v = e;
  while (v > i && s.charCodeAt(v - 1) === SP) v--;
  return [plain(s.slice(i, v)), e];
}

/** yaml's double-quoted escapes (compose/resolve-flow-scalar.js), less the tab it cannot meet. */
const ESCAPES: Record<string, string> = {
  '0': '\0',
  a: '\x07',
  b: '\b',
  e: '\x1b',
  f: '\f',
  n: '\n',
  r: '\r',
  t: '\t',
  v: '\v',
  N: '\u0085',
  _: '\u00a0',
  L: '\u2028',
  P: '\u2029',
  ' ': ' ',
  '"': '"',
  '/': '/',
  '\\': '\\',
};
const HEX_DIGITS: Record<string, number> = { x: 2, u: 4, U: 8 };
const HEX = /^[0-9a-fA-F]+$/;

/** A one-line quoted string at s[i]: its value and the index after the closing quote. */
function quoted(s: string, i: number): [string, number] {
  const q = s.charCodeAt(i);
  let out = '';
  let from = i + 1;
  for (let k = i + 1; k < s.length; k++) {
    const c = s.charCodeAt(k);
    if (c === q) {
      if (q === SQUOTE && s.charCodeAt(k + 1) === SQUOTE) {
        out += s.slice(from, k + 1);
        from = ++k + 1;
        continue;
      }
      return [out + s.slice(from, k), k + 1];
    }
    if (c === 92 /* \ */ && q === DQUOTE) {
      out += s.slice(from, k);
      const e = s[k + 1] ?? '';
      const len = HEX_DIGITS[e];
      if (len !== undefined) {
        const hex = s.substr(k + 2, len);
        if (hex.length !== len || !HEX.test(hex)) bail();
        const code = Number.parseInt(hex, 16);
        if (code > 0x10ffff) bail();
        out += String.fromCodePoint(code);
        k += 1 + len;
      } else {
        const ch = Object.hasOwn(ESCAPES, e) ? ESCAPES[e] : undefined;
        if (ch === undefined) bail();
        out += ch;
        k += 1;
      }
      from = k + 1;
    }
  }
  return bail(); // not closed on this line
}

const NULL = /^(?:~|[Nn]ull|NULL)?$/;
const BOOL = /^(?:[Tt]rue|TRUE|[Ff]alse|FALSE)$/;
const INT_OCT = /^0o[0-7]+$/;
const INT = /^[-+]?[0-9]+$/;
const INT_HEX = /^0x[0-9a-fA-F]+$/;
const FLOAT_NAN = /^(?:[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN)$/;
const FLOAT_EXP = /^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$/;
const FLOAT = /^[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)$/;

/** A plain scalar by the core schema, tested in yaml's order (schema/core/schema.js). */
function plain(s: string): unknown {
  const c = s.charCodeAt(0) | 0x20; // lower case for letters
  // a letter other than n, t, f cannot be null, bool or a number: the common case
  if (c >= 97 && c <= 122 && c !== 110 && c !== 116 && c !== 102) return s;
  if (NULL.test(s)) return null;
  if (BOOL.test(s)) return s[0] === 't' || s[0] === 'T';
  if (INT_OCT.test(s)) return Number.parseInt(s.substring(2), 8);
  if (INT.test(s)) return Number.parseInt(s, 10);
  if (INT_HEX.test(s)) return Number.parseInt(s.substring(2), 16);
  if (FLOAT_NAN.test(s))
    return s.slice(-3).toLowerCase() === 'nan'
      ? Number.NaN
      : s[0] === '-'
        ? Number.NEGATIVE_INFINITY
        : Number.POSITIVE_INFINITY;
  if (FLOAT_EXP.test(s) || FLOAT.test(s)) return Number.parseFloat(s);
  return s;
}
