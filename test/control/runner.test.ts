import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/control/clock.ts';
import { type RunnerOptions, type SyncRequest, SyncRunner } from '../../src/control/runner.ts';

interface Call extends SyncRequest {
  at: number;
}

function setup(opts: RunnerOptions = {}, result: (n: number) => boolean | undefined = () => true) {
  const clock = new FakeClock(0);
  const calls: Call[] = [];
  const errors: unknown[] = [];
  const runner = new SyncRunner(
    (req) => {
      calls.push({ ...req, at: clock.now() });
      return result(calls.length);
    },
    { clock, onError: (e) => errors.push(e), ...opts },
  );
  return { clock, calls, errors, runner };
}

/** Initialized, first (full) sync done, and the token bucket refilled. */
function ready(opts: RunnerOptions = {}, result?: (n: number) => boolean | undefined) {
  const s = setup(opts, result);
  s.runner.setInitialized('services');
  s.runner.setInitialized('endpointslices');
  s.clock.advance(0);
  s.clock.advance(10_000);
  return s;
}

describe('SyncRunner: initial gating', () => {
  it('runs nothing until both sources have synced, then one full sync', () => {
    const { clock, calls, runner } = setup();
    runner.run();
    clock.advance(120_000);
    expect(calls).toHaveLength(0);
    runner.setInitialized('services');
    runner.setInitialized('services');
    clock.advance(120_000);
    expect(calls).toHaveLength(0);
    runner.setInitialized('endpointslices');
    expect(calls).toHaveLength(0); // deferred, never inside the caller
    clock.advance(0);
    expect(calls).toEqual([{ full: true, reason: 'requested', at: 240_000 }]);
  });
});

describe('SyncRunner: bounded frequency', () => {
  it('coalesces requests made before the sync starts', () => {
    const { clock, calls, runner } = ready();
    const before = calls.length;
    for (let i = 0; i < 5; i++) runner.run();
    expect(runner.isPending).toBe(true);
    clock.advance(0);
    expect(calls.length - before).toBe(1);
    expect(runner.isPending).toBe(false);
  });

  it('allows a burst of 2, then waits for the next token (min interval 1 s)', () => {
    const { clock, calls, runner } = ready();
    const t0 = clock.now();
    const n0 = calls.length;
    runner.run();
    clock.advance(0);
    runner.run();
    clock.advance(0);
    expect(calls.length - n0).toBe(2);
    runner.run();
    clock.advance(999);
    expect(calls.length - n0).toBe(2);
    clock.advance(1);
    expect(calls.length - n0).toBe(3);
    expect(calls.at(-1)!.at).toBe(t0 + 1000);
  });

  it('spaces a steady stream of requests by the min interval', () => {
    const { clock, calls, runner } = ready({ minIntervalMs: 1000, burst: 2 });
    const n0 = calls.length;
    for (let ms = 0; ms < 5000; ms += 100) {
      runner.run();
      clock.advance(100);
    }
    const times = calls.slice(n0).map((c) => c.at);
    // Two back to back (the burst), then one per second counted from the first.
    expect(times[1] - times[0]).toBe(100);
    expect(times[2] - times[0]).toBe(1000);
    expect(times.slice(3).map((t, i) => t - times[i + 2])).toEqual([1000, 1000, 1000, 1000]);
  });

  it('syncs at least every max interval without requests', () => {
    const { clock, calls } = ready({ maxIntervalMs: 30_000 });
    const last = calls.at(-1)!.at;
    const n0 = calls.length;
    clock.advance(last + 30_000 - clock.now() - 1);
    expect(calls.length).toBe(n0);
    clock.advance(1);
    expect(calls.at(-1)).toEqual({ full: false, reason: 'periodic', at: last + 30_000 });
  });

  it('a request resets the periodic timer', () => {
    const { clock, calls, runner } = ready({ maxIntervalMs: 30_000 });
    runner.run();
    clock.advance(0);
    const t = clock.now();
    clock.advance(29_999);
    expect(calls.at(-1)!.at).toBe(t);
    clock.advance(1);
    expect(calls.at(-1)!.at).toBe(t + 30_000);
  });
});

describe('SyncRunner: full syncs and retries', () => {
  it('partial syncs follow the first full one; a full sync comes back after the full-sync interval', () => {
    const { clock, calls } = ready({ maxIntervalMs: 30_000, fullSyncIntervalMs: 3_600_000 });
    clock.advance(3_600_000);
    const fulls = calls.filter((c) => c.full).map((c) => c.at);
    expect(fulls[0]).toBe(0);
    expect(fulls).toHaveLength(2);
    expect(fulls[1]).toBeGreaterThanOrEqual(3_600_000);
    expect(calls.filter((c) => !c.full).length).toBeGreaterThan(100);
  });

  it('a sync returning false is retried after the retry interval, and the retry is full', () => {
    const { clock, calls, runner, errors } = ready(
      { retryIntervalMs: 5000, maxIntervalMs: 30_000 },
      (n) => n !== 2,
    );
    runner.run();
    clock.advance(0);
    expect(calls[1]).toMatchObject({ full: false, reason: 'requested' });
    expect(errors).toHaveLength(1);
    expect(runner.failures).toBe(1);
    const failedAt = calls[1].at;
    clock.advance(4999);
    expect(calls).toHaveLength(2);
    clock.advance(1);
    expect(calls[2]).toEqual({ full: true, reason: 'retry', at: failedAt + 5000 });
    runner.run();
    clock.advance(1000);
    expect(calls[3]).toMatchObject({ full: false, reason: 'requested' });
  });

  it('a throwing sync counts as failed, reports the error and forces a full sync even when requested early', () => {
    const boom = new Error('map full');
    const { clock, calls, runner, errors } = ready({ retryIntervalMs: 30_000 }, (n) => {
      if (n === 2) throw boom;
      return true;
    });
    runner.run();
    clock.advance(0);
    expect(errors).toEqual([boom]);
    runner.run();
    clock.advance(1000);
    expect(calls[2]).toMatchObject({ full: true, reason: 'requested' });
  });

  it('requestFullSync makes the next sync full', () => {
    const { clock, calls, runner } = ready();
    runner.requestFullSync();
    clock.advance(0);
    expect(calls.at(-1)).toMatchObject({ full: true, reason: 'requested' });
  });
});

describe('SyncRunner: async syncs and stop', () => {
  it('never overlaps syncs: a request during an async sync runs after it', async () => {
    const clock = new FakeClock(0);
    let active = 0;
    let maxActive = 0;
    const releases: (() => void)[] = [];
    const runner = new SyncRunner(
      () =>
        new Promise<boolean>((resolve) => {
          active++;
          maxActive = Math.max(maxActive, active);
          releases.push(() => {
            active--;
            resolve(true);
          });
        }),
      { clock, minIntervalMs: 0 },
    );
    runner.setInitialized('services');
    runner.setInitialized('endpointslices');
    clock.advance(0);
    expect(releases).toHaveLength(1);
    runner.run();
    clock.advance(10);
    expect(releases).toHaveLength(1);
    releases[0]();
    await Promise.resolve();
    clock.advance(0);
    expect(releases).toHaveLength(2);
    expect(maxActive).toBe(1);
  });

  it('stop cancels the timers', () => {
    const { clock, calls, runner } = ready();
    const n = calls.length;
    runner.stop();
    runner.run();
    clock.advance(120_000);
    expect(calls.length).toBe(n);
    expect(clock.pending).toBe(0);
  });
});

describe('SyncRunner: no periodic sync', () => {
  it('with maxInterval Infinity only requests run, and no timer is left armed', () => {
    const { clock, calls, runner } = ready({ maxIntervalMs: Number.POSITIVE_INFINITY });
    expect(calls).toHaveLength(1);
    expect(clock.pending).toBe(0);
    runner.run();
    clock.advance(0);
    expect(calls).toHaveLength(2);
    clock.advance(3_600_000);
    expect(calls).toHaveLength(2);
  });
});
