// The TUN's kernel-side drop counters (issue 18, point 5): read from the device's sysfs
// statistics, -1 when they cannot be read (offline: a fake sysfs root).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { tunKernelStats } from '../../src/tun/tun.ts';

const root = mkdtempSync(join(tmpdir(), 'kt-sysfs-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('tunKernelStats', () => {
  it('reads tx_dropped (toward the reader) and rx_dropped of the device', () => {
    mkdirSync(join(root, 'kt0/statistics'), { recursive: true });
    writeFileSync(join(root, 'kt0/statistics/tx_dropped'), '73412\n');
    writeFileSync(join(root, 'kt0/statistics/rx_dropped'), '5\n');
    expect(tunKernelStats('kt0', root)).toEqual({ txDropped: 73412, rxDropped: 5 });
  });

  it('is -1 for a device (or a counter) that is not there', () => {
    expect(tunKernelStats('nope0', root)).toEqual({ txDropped: -1, rxDropped: -1 });
  });
});
