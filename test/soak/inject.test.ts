// Root test of the soak's injection (scripts/soak/inject.ts): a class of loopback-sourced SYNs
// sent from a pod is counted by the agent in its own window, however long the pod has been
// quiet. Regression: twice the soak's src-loopback class counted nothing in its window and 116
// DROP_MARTIAN_LOOPBACK in the next one. The pod had no neighbour entry for its gateway; the
// kernel asked "who-has 10.244.1.1 tell 127.0.0.1" (the sender address taken from the waiting
// packet, its own on lo), which proxy ARP never answers, and held the packets in the neighbour
// queue until the next class's ARP resolved the gateway (or dropped them 3 s later).
import { createRequire } from 'node:module';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ctlRequest } from '../../src/node/ctl.ts';
import { injectFromPod } from '../../scripts/soak/inject.ts';
import { injectionClasses } from '../../scripts/soak/packets.ts';
import { Topo } from '../node/topo.ts';

const hasRawSocket = (() => {
  try {
    createRequire(import.meta.url)('raw-socket');
    return true;
  } catch {
    return false;
  }
})();

const COUNT = 50;
const t = new Topo();

const loopbackCount = async () =>
  ((await ctlRequest(t.socket, { cmd: 'counters' })) as { counters: Record<string, number> })
    .counters.DROP_MARTIAN_LOOPBACK;

describe.skipIf(process.getuid?.() !== 0 || !hasRawSocket)('the soak injection', () => {
  beforeAll(async () => {
    await t.setup();
    await t.startAgent();
  }, 120_000);
  afterAll(() => t.teardown());

  it('counts a loopback-source class in its own window from a pod with no gateway neighbour', async () => {
    const lo = injectionClasses().find((c) => c.name === 'src-loopback')!;
    // the pod has sent nothing yet; flushed, as a quiet pod's entry would have aged out
    t.must('client', ['ip', 'neigh', 'flush', 'all']);
    const before = await loopbackCount();
    expect(await injectFromPod(t.ns('client'), lo.packet, COUNT)).toBe(`sent ${COUNT}, errors 0`);
    // the soak reads each class's counters 300 ms after its last packet
    await sleep(300);
    expect((await loopbackCount()) - before).toBe(COUNT);
  });
});
