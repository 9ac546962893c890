// The agent's monitor streams (src/node/monitor.ts) over a real control socket (src/node/ctl.ts)
// read by the CLI's client (src/inspect/stream.ts): events with their fields and service name,
// filters, lost events counted when the reader is not there to read, a refused filter, and the
// ring off again once the client is gone.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import { formatMonitorEvent, type MonitorEvent } from '../../src/inspect/monitor.ts';
import { ctlStream } from '../../src/inspect/stream.ts';
import { CtlServer } from '../../src/node/ctl.ts';
import { MonitorHub } from '../../src/node/monitor.ts';
import {
  buildIcmpEcho,
  buildTcp,
  endpoint,
  loaderOf,
  run,
  SYN,
  service,
  servicePort,
} from '../datapath/harness.ts';

const dir = mkdtempSync(join(tmpdir(), 'kt-mon-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const VIP = '10.96.0.10';

async function setup(name: string, ringCapacity = 1024) {
  const dp = createDatapath({ seed: 3, eventRingCapacity: ringCapacity });
  loaderOf(dp).load([
    servicePort(service('web', VIP), 80, 'TCP', [endpoint('10.244.2.5:8080')], 'http'),
  ]);
  const hub = new MonitorHub(dp, 'node1');
  hub.nameOf = (id) => (id === dp.ct.revNat(0) ? 'default/web:http' : undefined);
  const path = join(dir, name, 'node1.sock');
  const srv = await CtlServer.listen(path, (req) =>
    req.cmd === 'monitor' ? hub.request(req) : { error: 'no' },
  );
  return { dp, hub, path, srv };
}

const waitFor = async (cond: () => boolean, ms = 5000) => {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
};

describe('kubetun monitor, agent side', () => {
  it("streams a curl's DNAT and a ping's drop with their reasons; ends cleanly; ring off after", async () => {
    const { dp, hub, path, srv } = await setup('a');
    try {
      const got: MonitorEvent[] = [];
      const done = ctlStream(path, { cmd: 'monitor', filter: {} }, (m) => {
        if (m.type !== 'status') got.push(m as unknown as MonitorEvent);
        return got.length < 2;
      });
      await waitFor(() => dp.events.on === 1);
      run(dp, buildTcp({ src: '10.244.1.10', dst: VIP, sport: 40000, dport: 80, flags: SYN }));
      run(dp, buildIcmpEcho({ src: '10.244.1.10', dst: VIP, ident: 1, seq: 1 }));
      const end = await done;
      expect(end.by).toBe('output');
      expect(got[0]).toMatchObject({
        type: 'trace',
        reason: 'TX_DNAT_NEW',
        verdict: 'TX',
        proto: 'tcp',
        before: { src: '10.244.1.10', dst: VIP, sport: 40000, dport: 80 },
        after: { src: '10.244.1.10', dst: '10.244.2.5', sport: 40000, dport: 8080 },
        backend: '10.244.2.5:8080',
        ctNew: true,
        service: 'default/web:http',
        lost: 0,
      });
      expect(got[1]).toMatchObject({ type: 'drop', reason: 'DROP_ECHO_TO_VIP', proto: 'icmp' });
      expect(formatMonitorEvent(got[0]!)).toMatch(
        /node1 -> trace TX_DNAT_NEW svc default\/web:http backend 10.244.2.5:8080 ct new: tcp 10.244.1.10:40000 -> 10.96.0.10:80 => 10.244.1.10:40000 -> 10.244.2.5:8080$/,
      );
      expect(formatMonitorEvent(got[1]!)).toMatch(
        /node1 xx drop \(DROP_ECHO_TO_VIP\): icmp 10.244.1.10 -> 10.96.0.10$/,
      );
      await waitFor(() => hub.open === 0);
      expect(dp.events.on).toBe(0);
    } finally {
      await srv.close();
    }
  });

  it('--drops filters in the datapath; a reader that is not reading loses events, counted', async () => {
    const { dp, hub, path, srv } = await setup('b', 16);
    try {
      const got: Record<string, unknown>[] = [];
      const done = ctlStream(path, { cmd: 'monitor', filter: { type: 'drop' } }, (m) => {
        got.push(m);
        return !(m.type === 'drop' && Number(m.lost) > 0);
      });
      await waitFor(() => dp.events.on === 1);
      // 100 drops within one drain interval, into a ring of 16: most are overwritten
      for (let i = 0; i < 100; i++)
        run(dp, buildIcmpEcho({ src: '10.244.1.10', dst: VIP, ident: 1, seq: i }));
      run(dp, buildTcp({ src: '10.244.1.10', dst: VIP, sport: 40001, dport: 80, flags: SYN })); // not a drop
      await done;
      const evs = got.filter((m) => m.type !== 'status');
      expect(evs.every((m) => m.reason === 'DROP_ECHO_TO_VIP')).toBe(true);
      expect(evs.length).toBeLessThanOrEqual(16);
      expect(Number(evs.at(-1)!.lost)).toBe(100 - 16);
      await waitFor(() => hub.open === 0);
      expect(hub.lost).toBe(100 - 16);
    } finally {
      await srv.close();
    }
  });

  it('a bad filter is refused naming the field, and takes no subscriber', async () => {
    const { dp, path, srv } = await setup('c');
    try {
      await expect(
        ctlStream(path, { cmd: 'monitor', filter: { reasons: ['NOPE'] } }, () => true),
      ).rejects.toThrow(/filter.reasons: "NOPE" is not a reason/);
      expect(dp.events.subscribers).toBe(0);
    } finally {
      await srv.close();
    }
  });
});
