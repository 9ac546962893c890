// Work on the packet loop's thread in steps (turns.ts): the event loop turns between two.
import { describe, expect, it } from 'vitest';
import { inSteps } from '../../src/control/turns.ts';

describe('inSteps', () => {
  it('runs no more than a step synchronously', () => {
    const seen: number[] = [];
    expect(inSteps([1, 2, 3], 3, (x) => seen.push(x))).toBeUndefined();
    expect(seen).toEqual([1, 2, 3]);
  });

  it('lets the event loop turn between two steps', async () => {
    const seen: string[] = [];
    setImmediate(() => seen.push('turn'));
    const done = inSteps([1, 2, 3, 4, 5], 2, (x) => seen.push(String(x)));
    expect(done).toBeInstanceOf(Promise);
    expect(seen).toEqual(['1', '2']);
    await done;
    expect(seen).toEqual(['1', '2', 'turn', '3', '4', '5']);
  });
});
