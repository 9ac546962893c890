// The control plane process (`kubetun lab control-plane`, started by `lab up`): opens the
// persisted store, serves the API, prints "synced ..." once every Pod has started (lab up waits
// for that line before it starts the data planes) and stops every Pod on SIGTERM (`lab down`).
import { setTimeout as sleep } from 'node:timers/promises';
import { API_SOCKET } from './api.ts';
import { LabControlPlane } from './control-plane.ts';
import { STORE_DIR } from './state.ts';
import { loadTopology } from './topology.ts';

export async function runControlPlane(topologyFile: string): Promise<void> {
  const t = loadTopology(topologyFile);
  const say = (msg: string) => console.log(`${new Date().toISOString()} ${msg}`);
  const cp = new LabControlPlane(t, { storeDir: STORE_DIR, say });
  let stopping = false;
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.on(sig, () => {
      if (stopping) return;
      stopping = true;
      say(`${sig}: stopping every Pod`);
      void cp.stop().then(() => process.exit(0));
    });
  }
  await cp.start(API_SOCKET);
  say(`API on ${API_SOCKET}`);
  const until = Date.now() + 80_000;
  while (!cp.synced() && Date.now() < until) await sleep(100);
  const pods = cp.store.list('Pod').length;
  console.log(
    `synced ${pods} pods, ${cp.store.list('Service').length} services${cp.synced() ? '' : ' (some Pods did not start)'}`,
  );
}
