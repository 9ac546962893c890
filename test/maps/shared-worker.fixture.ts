// Runs in a worker thread (see shared.test.ts): attaches to maps built by the main thread and
// answers from them, then writes into them, to show the SharedArrayBuffer backing really works.
import { parentPort, workerData } from 'node:worker_threads';
import { ConntrackMap } from '../../src/maps/conntrack.ts';
import { ServiceMap } from '../../src/maps/services.ts';

const { svcBuf, ctBuf, svcCap, ctCap } = workerData as {
  svcBuf: SharedArrayBuffer;
  ctBuf: SharedArrayBuffer;
  svcCap: number;
  ctCap: number;
};
const svc = new ServiceMap(svcCap, { buffer: svcBuf });
const ct = new ConntrackMap(ctCap, { buffer: ctBuf });
const m = svc.lookup(0x0a600001, 80, 6, 0);
const e = ct.lookupReply(6, 0x0af40207, 0x0af40105, 8080, 40000);
const created = ct.create(17, 1, 2, 3, 4, 5, 6, 7, 8, 9);
parentPort?.postMessage({
  count: m >= 0 ? svc.count(m) : -1,
  backendId: e >= 0 ? ct.backendId(e) : -1,
  created,
});
