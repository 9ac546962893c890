// The packet loop shares the agent's main thread (issue 18): control-plane work that could take
// more than a few ms at once — a checkout of thousands of changed objects, a sync writing
// thousands of service ports — is cut into steps with a turn of the event loop between two.
// setImmediate runs after the poll phase, so the TUN's pending batches go first.

/** Resolves on the next turn of the event loop, after pending I/O (the TUN's batches). */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Objects a checkout applies per step (ChangeTracker.checkoutSliced; each ~10-20 µs on this
 * machine idle), service ports a sync's metrics recount per step (Proxier); no more than this
 * runs in one go. 64, not 256: in the stall test's 5,000-Service load at load 7-10 a step of
 * 256 (the endpoints of 256 Services) took 15-18 ms on average and up to 160-190 ms, and 64
 * 1.5-4 ms, up to 35-90 ms (each step timed from its turn to the next task, 3 runs each) —
 * a gap the ping through the agent sees whole.
 */
export const CHECKOUT_STEP = 64;

/**
 * `fn` over `items`, `step` at a time with a turn of the event loop between two steps; in one
 * go, synchronously, when there are no more than `step` (small changes, fake-clock tests).
 */
export function inSteps<T>(
  items: readonly T[],
  step: number,
  fn: (x: T) => void,
): undefined | Promise<void> {
  if (items.length <= step) {
    for (const x of items) fn(x);
    return undefined;
  }
  return (async () => {
    for (let i = 0; i < items.length; i += step) {
      if (i > 0) await nextTurn();
      const end = Math.min(items.length, i + step);
      for (let k = i; k < end; k++) fn(items[k]);
    }
  })();
}
