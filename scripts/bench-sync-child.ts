// bench-sync's agent-like process (scripts/bench-sync.ts, "the agent's path"): the control plane
// as `kubetun run --manifests DIR` starts it (src/node/agent.ts startControl: the manifest worker,
// the all-or-nothing first load, the trackers, the prefill and the sliced sync into a fresh
// datapath, this node's name), timed from the start to the first full sync. Prints one JSON line.
//
// bench-sync runs it bundled by esbuild into build/bench/ (two levels below the repository, as
// build/js: src/runtime.ts then starts the manifest worker from build/js, the bundle the agent
// runs), or from the sources through tsx with --from-sources. Left out: the packet loop, the
// steering of endpoints (tc filters; src/node/steer-endpoints.ts) and the HTTP servers.
//
//   node build/bench/bench-sync-child.mjs DIR NODE
import { startControlPlane } from '../src/control/control-plane.ts';
import { datapathSync } from '../src/control/datapath-sync.ts';
import { createDatapath } from '../src/datapath/state/datapath.ts';
import { BUNDLED } from '../src/runtime.ts';

const [dir, nodeName] = process.argv.slice(2);
const dp = createDatapath({ svcCapacity: 1 << 17, beCapacity: 1 << 17 });
const sync = datapathSync(dp, { nodeName });
const alive = setInterval(() => {}, 1000); // the runner's timers do not hold the process
const t0 = performance.now();
const c0 = process.cpuUsage();
/** ms since t0 of the first time each step was seen */
const steps: Record<string, number> = {};
const step = (name: string) => {
  steps[name] ??= Math.round(performance.now() - t0);
};
const cp = await startControlPlane({
  source: {
    dir: dir!,
    pollIntervalMs: 0,
    worker: true,
    strictStart: true,
    parse: { serviceCidr: '10.96.0.0/12' },
  },
  prefill: true, // as the agent's fresh start: its maps are written while the directory streams in
  program: (req) => {
    step(req.full ? 'checkedOut' : 'prefill');
    return sync.program(req);
  },
  nodeName,
  metricsBind: null,
  healthzBind: null,
  // 'manifests loaded': every slice of the worker's changes is in the trackers
  log: { info: (_o, msg) => step(msg ?? ''), error: () => {} },
});
await cp.firstSync;
const ms = performance.now() - t0;
const c = process.cpuUsage(c0);
globalThis.gc?.();
const mem = process.memoryUsage(); // as the agent holds it
await cp.stop();
clearInterval(alive);
const cpuMs = (c.user + c.system) / 1000;
process.stdout.write(
  `${JSON.stringify({ ms, cpuMs, rss: mem.rss, heap: mem.heapUsed, heapTotal: mem.heapTotal, steps, bundled: BUNDLED, services: dp.svc.size })}\n`,
);
process.exit(0);
