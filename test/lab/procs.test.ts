// procs.ts: a process restarted into the log it shared with its last run (a Pod's server after
// restartPolicy Always, a supervised agent) is ready only when it says so itself.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readLog, startInNs, stopProcess, waitForLog } from '../../src/lab/procs.ts';
import { type NsRoute, withNsRoute } from '../../src/sh.ts';

// No namespace needed: the route runs the command right here.
const HERE: NsRoute = { argv: (_ns, argv) => [...argv], node: process.execPath };
const dir = mkdtempSync(join(tmpdir(), 'kt-procs-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('waitForLog', () => {
  it("waits for the restarted process's own ready line, not the one its last run left", async () => {
    const log = join(dir, 'server.log');
    await withNsRoute(HERE, async () => {
      const first = startInNs('server', 'p', 'none', ['sh', '-c', 'echo ready 1; sleep 30'], log);
      await waitForLog(first, /^ready /m, 5000);
      await stopProcess(first, 100);
      // the second run says "ready" only after 0.6 s: the log holds run 1's line all that time
      const argv = ['sh', '-c', 'echo starting; sleep 0.6; echo ready 2; sleep 30'];
      const second = startInNs('server', 'p', 'none', argv, log);
      expect(second.logFrom).toBe(Buffer.byteLength('ready 1\n'));
      const t0 = Date.now();
      await waitForLog(second, /^ready /m, 5000);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(500);
      expect(readLog(log, second.logFrom)).toBe('starting\nready 2\n');
      await stopProcess(second, 100);
    });
  });

  it('fails at once when the process dies before its ready line, whatever the log held before', async () => {
    const log = join(dir, 'dies.log');
    await withNsRoute(HERE, async () => {
      const first = startInNs('server', 'p', 'none', ['sh', '-c', 'echo ready 1'], log);
      await waitForLog(first, /^ready /m, 5000);
      const second = startInNs('server', 'p', 'none', ['sh', '-c', 'echo bad flag; exit 3'], log);
      await expect(waitForLog(second, /^ready /m, 5000)).rejects.toThrow(/exited:\n[\s\S]*bad flag/);
    });
  });
});
