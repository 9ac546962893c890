import { describe, expect, it } from 'vitest';
import { formatTable, NONE } from '../../src/inspect/table.ts';

describe('formatTable (kubectl-style)', () => {
  it('pads every column to its widest cell with three spaces between, no trailing blanks', () => {
    const lines = formatTable(
      ['name', 'type', 'cluster-ip', 'port(s)'],
      [
        ['web', 'ClusterIP', '10.96.0.10', '80/TCP'],
        ['web-nodeport', 'NodePort', '10.96.0.11', '80:30080/TCP'],
      ],
    );
    expect(lines).toEqual([
      'NAME           TYPE        CLUSTER-IP   PORT(S)',
      'web            ClusterIP   10.96.0.10   80/TCP',
      'web-nodeport   NodePort    10.96.0.11   80:30080/TCP',
    ]);
  });

  it('prints <none> for empty cells and counts code points, not UTF-16 units', () => {
    const lines = formatTable(
      ['a', 'b'],
      [
        ['µs→', ''],
        ['x', 'y'],
      ],
    );
    expect(lines).toEqual(['A     B', `µs→   ${NONE}`, 'x     y']);
  });
});
