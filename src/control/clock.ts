// Time as the control loop sees it. Everything time-dependent in src/control takes a Clock so
// tests drive it with FakeClock instead of sleeping (no timing assertions in tests).

export type TimerHandle = unknown;

export interface Clock {
  /** milliseconds since the epoch */
  now(): number;
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => {
    // Node fires delays above 2^31-1 ms at once; cap them (the caller re-checks when woken).
    const t = setTimeout(fn, Math.min(Math.max(0, ms), 0x7fffffff));
    // A pending resync must not keep a finished process (or a test worker) alive.
    t.unref?.();
    return t;
  },
  clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

interface FakeTimer {
  id: number;
  at: number;
  fn: () => void;
}

/**
 * A manual clock: timers fire only inside advance()/runDue(), in due-time order (ties in
 * creation order), with now() set to each timer's due time while it runs.
 */
export class FakeClock implements Clock {
  private t: number;
  private nextId = 1;
  private timers: FakeTimer[] = [];

  constructor(startMs = 1_700_000_000_000) {
    this.t = startMs;
  }

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const timer = { id: this.nextId++, at: this.t + Math.max(0, ms), fn };
    this.timers.push(timer);
    return timer.id;
  }

  clearTimeout(handle: TimerHandle): void {
    this.timers = this.timers.filter((x) => x.id !== handle);
  }

  /** Number of armed timers (for tests that check nothing is left scheduled). */
  get pending(): number {
    return this.timers.length;
  }

  /** Due time of the earliest armed timer, or undefined. */
  nextDue(): number | undefined {
    let best: number | undefined;
    for (const x of this.timers) if (best === undefined || x.at < best) best = x.at;
    return best;
  }

  /** Moves time forward by ms, firing every timer that falls due on the way. */
  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      const next = this.popDue(end);
      if (!next) break;
      this.t = Math.max(this.t, next.at);
      next.fn();
    }
    this.t = end;
  }

  private popDue(limit: number): FakeTimer | undefined {
    let idx = -1;
    for (let i = 0; i < this.timers.length; i++) {
      const x = this.timers[i];
      if (x.at > limit) continue;
      if (
        idx < 0 ||
        x.at < this.timers[idx].at ||
        (x.at === this.timers[idx].at && x.id < this.timers[idx].id)
      ) {
        idx = i;
      }
    }
    if (idx < 0) return undefined;
    return this.timers.splice(idx, 1)[0];
  }
}
