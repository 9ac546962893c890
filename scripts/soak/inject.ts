// The soak's injection from one pod: crafted packets sent through inject.cjs (a raw socket in the
// pod's namespace), after the pod's gateway is resolved.
//
// Why the gateway first: the kernel takes an ARP request's sender address from the packet that
// waits for it when that address is one of its own (arp_solicit, arp_announce 0) — and 127.0.0.1
// is, on lo. So a pod with no neighbour entry for its gateway asks "who-has 10.244.1.1 tell
// 127.0.0.1", which the node's proxy ARP never answers, and holds the loopback-sourced packets
// in the neighbour's queue (unres_qlen_bytes, 212992: about 116 of them) meanwhile: they leave
// only when another packet's ARP resolves the gateway (the next class's, a second later: the
// soak counted them there), else they are dropped when the entry fails 3 s later. Any other
// source is not the pod's own and the ARP asks with the pod's address. A ping of the gateway
// first makes the entry REACHABLE (for 15-45 s, longer than a class takes), so each class's
// packets go out at once and are counted in its own window.
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';

const HERE = import.meta.dirname;

/** The pod's default gateway (`ip -j route show default` in its namespace). */
export function podGateway(ns: string): string {
  const r = spawnSync('ip', ['netns', 'exec', ns, 'ip', '-j', 'route', 'show', 'default'], {
    encoding: 'utf8',
  });
  const gw = (JSON.parse(r.stdout || '[]') as { gateway?: string }[])[0]?.gateway;
  if (!gw) throw new Error(`${ns}: no default gateway (${r.stderr.trim() || 'no route'})`);
  return gw;
}

/** One ping of the pod's gateway: its neighbour entry resolved with the pod's own address. */
export function resolveGateway(ns: string): void {
  const gw = podGateway(ns);
  const r = spawnSync('ip', ['netns', 'exec', ns, 'ping', '-n', '-c', '1', '-W', '2', gw], {
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`${ns}: the gateway ${gw} does not answer a ping`);
}

/**
 * Sends `packet` (a whole IPv4 packet) `count` times from the pod in namespace `ns`, paced by
 * inject.cjs, after resolving the pod's gateway; returns inject.cjs's "sent N, errors E".
 */
export async function injectFromPod(
  ns: string,
  packet: Uint8Array,
  count: number,
): Promise<string> {
  resolveGateway(ns);
  const argv = [process.execPath, join(HERE, 'inject.cjs'), String(count)];
  const p = spawn('ip', ['netns', 'exec', ns, ...argv], { stdio: ['pipe', 'pipe', 'inherit'] });
  let sent = '';
  p.stdout.on('data', (b: Buffer) => {
    sent += b;
  });
  p.stdin.end(`x ${Buffer.from(packet).toString('hex')}\n`);
  await new Promise((r) => p.once('exit', r));
  return sent.trim();
}
