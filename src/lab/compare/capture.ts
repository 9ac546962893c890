// Capturing one scenario run: tcpdump -w at every capture point (the client's node-side veth,
// each possible backend's veth, every node's uplink), then the pcaps read back with the
// project's reader (src/pcap/reader.ts) into packet records.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { readPcap } from '../../pcap/reader.ts';
import { startInNs, stopProcess, waitForLog } from '../procs.ts';
import { LOG_DIR, type LabProcess } from '../state.ts';
import type { HopAt } from '../show/flow.ts';
import { allPods, type LabClient, type LabPod, type Topology } from '../topology.ts';
import { decodeIpv4, type Pkt } from './packets.ts';

export interface CapturePoint {
  name: string;
  ns: string;
  ifname: string;
  /** the pod behind a veth point, if any */
  pod?: string;
  /** where the lab drawing marks it: the pod's veth, the node's or client's uplink */
  at: HopAt;
}

/** Client veth first (it fixes the order of ephemeral-port symbols), then backends, then uplinks. */
export function capturePoints(
  t: Topology,
  client: LabPod | LabClient,
  backendIps: string[],
): CapturePoint[] {
  const node = (name: string) => t.nodes.find((n) => n.name === name)!;
  // A pod client is captured on its node-side veth; an external client on its own uplink.
  const first: CapturePoint =
    'hostIf' in client
      ? {
          name: `${client.name} veth (client)`,
          ns: node(client.node).ns,
          ifname: client.hostIf,
          pod: client.name,
          at: { kind: 'pod', name: client.name },
        }
      : {
          name: `${client.name} ${client.uplink} (client)`,
          ns: client.ns,
          ifname: client.uplink,
          at: { kind: 'client', name: client.name },
        };
  const points: CapturePoint[] = [first];
  for (const p of allPods(t).filter((p) => backendIps.includes(p.ip) && p !== client))
    points.push({
      name: `${p.name} veth`,
      ns: node(p.node).ns,
      ifname: p.hostIf,
      pod: p.name,
      at: { kind: 'pod', name: p.name },
    });
  for (const n of t.nodes)
    points.push({
      name: `${n.name} ${n.uplink}`,
      ns: n.ns,
      ifname: n.uplink,
      at: { kind: 'node', name: n.name },
    });
  return points;
}

export interface Running {
  points: CapturePoint[];
  procs: LabProcess[];
  files: string[];
}

/** filter: a tcpdump filter expression (default: the client's address) */
export async function startCaptures(
  points: CapturePoint[],
  filter: string,
  tag: string,
): Promise<Running> {
  const dir = join(LOG_DIR, 'compare');
  mkdirSync(dir, { recursive: true });
  const procs: LabProcess[] = [];
  const files: string[] = [];
  for (const cp of points) {
    const base = join(dir, `${tag}-${cp.ns}-${cp.ifname}`);
    const log = `${base}.log`;
    writeFileSync(log, '');
    files.push(`${base}.pcap`);
    // -U: every packet is written as it comes, so stopping the capture loses nothing.
    const argv = ['tcpdump', '-i', cp.ifname, '-n', '-U', '--immediate-mode', '-w', `${base}.pcap`];
    argv.push(`ip and (${filter})`);
    procs.push(startInNs('capture', cp.name, cp.ns, argv, log));
  }
  try {
    await Promise.all(procs.map((p) => waitForLog(p, /listening on/, 10_000)));
  } catch (err) {
    await Promise.all(procs.map((p) => stopProcess(p, 500)));
    throw err;
  }
  return { points, procs, files };
}

/** Stops the captures (after letting the last packets land) and reads every pcap back. */
export async function stopCaptures(r: Running): Promise<{ point: CapturePoint; packets: Pkt[] }[]> {
  await sleep(300);
  await Promise.all(r.procs.map((p) => stopProcess(p, 2000)));
  return r.points.map((point, i) => {
    const pcap = readPcap(new Uint8Array(readFileSync(r.files[i]!)), r.files[i]);
    const packets = pcap.packets.flatMap((p) => {
      const d = decodeIpv4(p.data, p.tsSec * 1e6 + Math.floor(p.tsNsec / 1000));
      return d ? [d] : [];
    });
    return { point, packets };
  });
}
