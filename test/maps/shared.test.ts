import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { ConntrackMap } from '../../src/maps/conntrack.ts';
import { ServiceMap } from '../../src/maps/services.ts';

// Workers do not inherit vitest's TypeScript transform, and tsx's ESM hooks do not reach a
// worker on Node 20: boot the fixture through tsx's CommonJS require hook instead.
function bootTs(fixture: URL): string {
  const tsx = createRequire(import.meta.url).resolve('tsx/cjs');
  return `require(${JSON.stringify(tsx)}); require(${JSON.stringify(fileURLToPath(fixture))});`;
}

describe('maps shared with a worker thread', () => {
  it('a worker attached to the SharedArrayBuffers reads entries and its writes are seen here', async () => {
    const svc = new ServiceMap(64, { shared: true });
    const ct = new ConntrackMap(256, { shared: true });
    svc.upsertMaster(0x0a600001, 80, 6, 3, 1, 0, 0, 0);
    ct.create(6, 0x0af40105, 0x0a600001, 40000, 80, 0x0af40207, 8080, 42, 1, 100);
    const worker = new Worker(bootTs(new URL('./shared-worker.fixture.ts', import.meta.url)), {
      eval: true,
      workerData: { svcBuf: svc.buffer, ctBuf: ct.buffer, svcCap: 64, ctCap: 256 },
    });
    const reply = await new Promise<{ count: number; backendId: number; created: number }>(
      (resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
      },
    );
    await worker.terminate();
    expect(reply.count).toBe(3);
    expect(reply.backendId).toBe(42);
    expect(reply.created).toBeGreaterThanOrEqual(0);
    expect(ct.size).toBe(2);
    expect(ct.lookupOrig(17, 1, 2, 3, 4)).toBe(reply.created);
    expect(ct.lookupReply(17, 5, 1, 6, 3)).toBe(reply.created);
  });
});
