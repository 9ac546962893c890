import { describe, expect, test } from 'vitest';
import { matchesSelector, parseSelector, SelectorError } from '../../src/cluster/selector.ts';

describe('matchesSelector', () => {
  test('a Service selector map: every key with exactly that value', () => {
    expect(matchesSelector({ app: 'web', tier: 'fe' }, { app: 'web' })).toBe(true);
    expect(matchesSelector({ app: 'wbe' }, { app: 'web' })).toBe(false);
    expect(matchesSelector({}, { app: 'web' })).toBe(false);
    expect(matchesSelector(undefined, { app: 'web' })).toBe(false);
    expect(matchesSelector({ app: 'web' }, {})).toBe(true);
  });

  test('a LabelSelector: matchLabels and every matchExpressions operator', () => {
    const sel = {
      matchLabels: { app: 'web' },
      matchExpressions: [
        { key: 'tier', operator: 'In' as const, values: ['fe', 'be'] },
        { key: 'env', operator: 'NotIn' as const, values: ['prod'] },
        { key: 'track', operator: 'Exists' as const },
        { key: 'legacy', operator: 'DoesNotExist' as const },
      ],
    };
    expect(matchesSelector({ app: 'web', tier: 'fe', track: 'x' }, sel)).toBe(true);
    expect(matchesSelector({ app: 'web', tier: 'fe', track: 'x', env: 'prod' }, sel)).toBe(false);
    expect(matchesSelector({ app: 'web', tier: 'db', track: 'x' }, sel)).toBe(false);
    expect(matchesSelector({ app: 'web', tier: 'fe' }, sel)).toBe(false);
    expect(matchesSelector({ app: 'web', tier: 'fe', track: '', legacy: '' }, sel)).toBe(false);
  });

  test('a label map whose key is "matchLabels" is still a map', () => {
    expect(matchesSelector({ matchLabels: 'x' }, { matchLabels: 'x' })).toBe(true);
  });
});

describe('parseSelector', () => {
  test("kubectl's -l forms", () => {
    expect(parseSelector('app=web,tier!=db')).toEqual({
      matchExpressions: [
        { key: 'app', operator: 'In', values: ['web'] },
        { key: 'tier', operator: 'NotIn', values: ['db'] },
      ],
    });
    expect(
      parseSelector('app==web, !legacy, track, env in (a, b),x notin (y)').matchExpressions,
    ).toEqual([
      { key: 'app', operator: 'In', values: ['web'] },
      { key: 'legacy', operator: 'DoesNotExist' },
      { key: 'track', operator: 'Exists' },
      { key: 'env', operator: 'In', values: ['a', 'b'] },
      { key: 'x', operator: 'NotIn', values: ['y'] },
    ]);
    expect(parseSelector('app.kubernetes.io/name=web').matchExpressions?.[0].key).toBe(
      'app.kubernetes.io/name',
    );
    expect(parseSelector('')).toEqual({});
  });

  test('what it parses, it matches as kubectl would', () => {
    const s = parseSelector('app=web,tier!=db');
    expect(matchesSelector({ app: 'web' }, s)).toBe(true);
    expect(matchesSelector({ app: 'web', tier: 'db' }, s)).toBe(false);
    expect(matchesSelector({ app: 'web', tier: 'fe' }, s)).toBe(true);
  });

  test('bad input names the term', () => {
    expect(() => parseSelector('app=web,,x')).toThrow(SelectorError);
    expect(() => parseSelector('app in (a')).toThrow(/unbalanced/);
    expect(() => parseSelector('app=we b')).toThrow(/cannot parse "app=we b"/);
  });
});
