// The loader's backends (load.ts): one row per distinct backend — (address, port, protocol) —
// that a loaded service port uses, with its id and how many of the loader's units use it, in
// typed arrays. At 10k services x 3 endpoints the loader kept an object and a key string per
// backend per service port and looked each up in four string-keyed Maps (ids, owners,
// reference counts, the transaction's copies): most of its planning and a fifth of the agent's
// heap (issue 18). Here an IPv4 backend is found by its numbers, with no string made; an IPv6
// one (rare) by its key text in a Map.
//
// Ids are load.ts's: FNV-1a of the key text "ip:port:proto" (IPv6 "[ip]:port:proto"), in
// 1..max, probed linearly past ids in use; a row keeps its id for its life. Rows made while an
// update plans are its transaction: `rollback(mark)` removes them when the update is refused,
// so a refused update leaves ids as they were.
import { fnv1a } from './ids.ts';

const EMPTY = 0;

/** Open addressing over two int32 words -> row (row + 1 stored; 0 = empty). */
class PairIndex {
  private a = new Int32Array(0);
  private b = new Int32Array(0);
  private row = new Int32Array(0);
  private mask = -1;
  private used = 0;

  find(a: number, b: number): number {
    if (this.used === 0) return -1;
    for (let i = pairHash(a, b) & this.mask; ; i = (i + 1) & this.mask) {
      const r = this.row[i];
      if (r === EMPTY) return -1;
      if (this.a[i] === a && this.b[i] === b) return r - 1;
    }
  }

  put(a: number, b: number, row: number): void {
    if ((this.used + 1) * 2 > this.mask + 1) this.grow();
    let i = pairHash(a, b) & this.mask;
    while (this.row[i] !== EMPTY) i = (i + 1) & this.mask;
    this.a[i] = a;
    this.b[i] = b;
    this.row[i] = row + 1;
    this.used++;
  }

  /** Backward-shift deletion: no tombstones, probe chains stay as if the key never was. */
  remove(a: number, b: number): void {
    const m = this.mask;
    let i = pairHash(a, b) & m;
    while (this.row[i] !== EMPTY && !(this.a[i] === a && this.b[i] === b)) i = (i + 1) & m;
    if (this.row[i] === EMPTY) return;
    this.used--;
    for (let j = (i + 1) & m; this.row[j] !== EMPTY; j = (j + 1) & m) {
      const home = pairHash(this.a[j], this.b[j]) & m;
      // j's entry may move into the hole at i unless its home lies in (i, j]
      if (i <= j ? home <= i || home > j : home <= i && home > j) {
        this.a[i] = this.a[j];
        this.b[i] = this.b[j];
        this.row[i] = this.row[j];
        i = j;
      }
    }
    this.row[i] = EMPTY;
  }

  private grow(): void {
    const { a, b, row } = this;
    const size = Math.max(1024, (this.mask + 1) * 2);
    this.a = new Int32Array(size);
    this.b = new Int32Array(size);
    this.row = new Int32Array(size);
    this.mask = size - 1;
    this.used = 0;
    for (let i = 0; i < row.length; i++) if (row[i] !== EMPTY) this.put(a[i], b[i], row[i] - 1);
  }
}

function pairHash(a: number, b: number): number {
  let h = Math.imul(a ^ 0x9e3779b9, 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13) ^ b, 0xc2b2ae35);
  return h ^ (h >>> 16);
}

export class BackendTable {
  /** backend id of each row (0: a free row) */
  id = new Int32Array(0);
  /** units (load.ts) that use the row */
  refs = new Int32Array(0);
  port = new Uint16Array(0);
  proto = new Uint8Array(0);
  /** IPv4 address (u32 bits) of an IPv4 row */
  addr4 = new Int32Array(0);
  /** scratch of the planner: the plan that last listed the row (load.ts dedups with it) */
  seen = new Int32Array(0);
  /** IPv6 rows: the address as the maps take it, and its RFC 5952 text */
  readonly addr6: (Int32Array | undefined)[] = [];
  readonly text6: (string | undefined)[] = [];
  private readonly byKey = new PairIndex();
  private readonly byId = new PairIndex();
  private readonly byKey6 = new Map<string, number>();
  private readonly key6: (string | undefined)[] = [];
  private readonly free: number[] = [];
  private rows = 0;
  /** rows made since the last commit(), in order (a mark is a length of it) */
  private readonly made: number[] = [];
  size = 0;

  constructor(readonly maxId: number) {}

  /** The row of IPv4 backend (addr, port, proto), made (with its id) when new. */
  row4(addr: number, text: string, port: number, proto: number): number {
    const k = (port << 8) | proto;
    const r = this.byKey.find(addr | 0, k);
    if (r >= 0) return r;
    const row = this.make(fnv1aKey(text, port, proto), port, proto, text);
    this.addr4[row] = addr;
    this.byKey.put(addr | 0, k, row);
    return row;
  }

  /** The row of IPv6 backend `text` (canonical), made when new. */
  row6(addr: Int32Array, text: string, port: number, proto: number): number {
    const key = `[${text}]:${port}:${proto}`;
    const r = this.byKey6.get(key);
    if (r !== undefined) return r;
    const row = this.make(fnv1a(key), port, proto, key, true);
    this.addr6[row] = addr;
    this.text6[row] = text;
    this.key6[row] = key;
    this.byKey6.set(key, row);
    return row;
  }

  isV6(row: number): boolean {
    return this.key6[row] !== undefined;
  }

  /** A mark for rollback(): the rows made after it are this transaction's. */
  mark(): number {
    return this.made.length;
  }

  /** Forget the rows made since `mark` (a refused update), newest first. */
  rollback(mark: number): void {
    while (this.made.length > mark) this.remove(this.made.pop()!);
  }

  /** Commit the rows made so far (they stay when a later update is rolled back). */
  commit(): void {
    this.made.length = 0;
  }

  /** Remove a row (its id is free again). */
  remove(row: number): void {
    const k6 = this.key6[row];
    if (k6 !== undefined) {
      this.byKey6.delete(k6);
      this.key6[row] = undefined;
      this.addr6[row] = undefined;
      this.text6[row] = undefined;
    } else {
      this.byKey.remove(this.addr4[row], (this.port[row] << 8) | this.proto[row]);
    }
    this.byId.remove(this.id[row], 0);
    this.id[row] = 0;
    this.refs[row] = 0;
    this.free.push(row);
    this.size--;
  }

  /** A new row with its id; `name`: its address text (IPv4) or key (IPv6), for a message. */
  private make(hash: number, port: number, proto: number, name: string, v6 = false): number {
    const max = this.maxId;
    let id = (hash % max) + 1;
    for (let tries = 0; this.byId.find(id, 0) >= 0; tries++) {
      if (tries >= max) {
        const key = v6 ? name : `${name}:${port}:${proto}`;
        throw new Error(`dpLoadServices: no free id for ${key} (all ${max} in use)`);
      }
      id = id === max ? 1 : id + 1;
    }
    const row = this.free.pop() ?? this.newRow();
    this.id[row] = id;
    this.refs[row] = 0;
    this.port[row] = port;
    this.proto[row] = proto;
    this.byId.put(id, 0, row);
    this.made.push(row);
    this.size++;
    return row;
  }

  private newRow(): number {
    const row = this.rows++;
    if (row >= this.id.length) {
      const n = Math.max(1024, this.id.length * 2);
      const grow = <T extends Int32Array | Uint16Array | Uint8Array>(
        a: T,
        make: (n: number) => T,
      ) => {
        const b = make(n);
        b.set(a);
        return b;
      };
      this.id = grow(this.id, (k) => new Int32Array(k));
      this.refs = grow(this.refs, (k) => new Int32Array(k));
      this.port = grow(this.port, (k) => new Uint16Array(k));
      this.proto = grow(this.proto, (k) => new Uint8Array(k));
      this.addr4 = grow(this.addr4, (k) => new Int32Array(k));
      this.seen = grow(this.seen, (k) => new Int32Array(k));
    }
    return row;
  }
}

/** fnv1a(`${text}:${port}:${proto}`), without making the string. */
function fnv1aKey(text: string, port: number, proto: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  h = Math.imul(h ^ 58, 0x01000193); // ':'
  h = fnvDigits(h, port);
  h = Math.imul(h ^ 58, 0x01000193);
  return fnvDigits(h, proto) >>> 0;
}

/** FNV-1a steps over the decimal digits of n (n >= 0). */
function fnvDigits(h: number, n: number): number {
  const start = n >= 10000 ? 10000 : n >= 1000 ? 1000 : n >= 100 ? 100 : n >= 10 ? 10 : 1;
  for (let d = start; d >= 1; d = (d / 10) | 0)
    h = Math.imul(h ^ (48 + (((n / d) | 0) % 10)), 0x01000193);
  return h;
}
