// The loader's deterministic ids (load.ts header): a hash of a key's text in 1..max, probed
// linearly past ids in use; an id keeps its owner while the owner exists, so conntrack entries
// holding ids stay meaningful across syncs and a restarted agent computes the same ids.
// Reverse-NAT ids live in an IdTable; backend ids in the BackendTable (backend-table.ts), which
// hashes the same text without making it.

/** FNV-1a, 32 bits, over the UTF-16 code units (keys here are ASCII). */
export function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/**
 * Hash-derived ids in 1..max with linear probing; an id keeps its owner while it exists. Ids
 * given while an update plans are its transaction: rollback(mark) takes them back when the
 * update is refused (they used to be kept aside and copied in on success: two more Maps).
 */
export class IdTable {
  readonly ids = new Map<string, number>();
  readonly owner = new Map<number, string>();
  /** keys given an id since the last commit(), in order */
  private readonly made: string[] = [];

  constructor(readonly max: number) {}

  /** The id of `key`, given now (from `hash`) when it has none. */
  assign(key: string, hash: number): number {
    const have = this.ids.get(key);
    if (have !== undefined) return have;
    const max = this.max;
    let id = (hash % max) + 1;
    for (let tries = 0; this.owner.has(id); tries++) {
      if (tries >= max)
        throw new Error(`dpLoadServices: no free id for ${key} (all ${max} in use)`);
      id = id === max ? 1 : id + 1;
    }
    this.ids.set(key, id);
    this.owner.set(id, key);
    this.made.push(key);
    return id;
  }

  release(key: string, id: number): void {
    if (this.ids.get(key) !== id) return;
    this.ids.delete(key);
    this.owner.delete(id);
  }

  /** A mark for rollback(). */
  mark(): number {
    return this.made.length;
  }

  /** Take back the ids given since `mark`. */
  rollback(mark: number): void {
    while (this.made.length > mark) {
      const key = this.made.pop()!;
      const id = this.ids.get(key);
      if (id !== undefined) this.release(key, id);
    }
  }

  commit(): void {
    this.made.length = 0;
  }
}
