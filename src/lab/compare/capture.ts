// Capturing one scenario run: tcpdump at every capture point (the client's node-side veth,
// each possible backend's veth, every node's uplink), its pcap streamed to a file here
// (`tcpdump -U -w -`: where the point is a VM's, over ssh), then read back with the project's
// reader (src/pcap/reader.ts) into packet records — on this machine's clock.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { readPcap } from '../../pcap/reader.ts';
import { endStream, readLog, type Stream, startStream, tail, waitForStreamLog } from '../procs.ts';
import { LabError } from '../error.ts';
import type { HopAt } from '../show/flow.ts';
import { allPods, type LabClient, type LabPod, type Topology } from '../topology.ts';
import { decodeIp, type Pkt } from './packets.ts';

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
  const isBackend = (p: LabPod) =>
    backendIps.includes(p.ip) || (p.ip6 !== undefined && backendIps.includes(p.ip6));
  for (const p of allPods(t).filter((p) => isBackend(p) && p !== client))
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
  streams: Stream[];
}

/**
 * IPv6 captures leave out ICMPv6 types 130-143 (multicast listener and neighbour discovery,
 * router solicitations): the links' own housekeeping, timed by neighbour caches rather than by
 * the data plane, would otherwise land in one run's capture and not the other's.
 */
const IP6_NO_LINK_CONTROL = 'ip6 and not (icmp6 and ip6[40] >= 130 and ip6[40] <= 143)';

/**
 * filter: a tcpdump filter expression (default: the client's address); dir: where pcaps go;
 * family: which packets (IPv6: IP6_NO_LINK_CONTROL)
 */
export async function startCaptures(
  points: CapturePoint[],
  filter: string,
  tag: string,
  dir: string,
  readyMs = 10_000,
  family?: 'IPv6',
): Promise<Running> {
  mkdirSync(dir, { recursive: true });
  const streams: Stream[] = [];
  for (const cp of points) {
    const base = join(dir, `${tag}-${cp.ns}-${cp.ifname}`);
    writeFileSync(`${base}.log`, '');
    // -U: every packet is written to the pipe as it comes; the stream's end (endStream) stops
    // tcpdump with SIGTERM only after the far side has everything, so nothing is lost.
    const argv = ['tcpdump', '-i', cp.ifname, '-n', '-U', '--immediate-mode', '-w', '-'];
    argv.push(`${family === 'IPv6' ? IP6_NO_LINK_CONTROL : 'ip'} and (${filter})`);
    streams.push(startStream(cp.name, cp.ns, argv, `${base}.pcap`, `${base}.log`));
  }
  try {
    await Promise.all(streams.map((s) => waitForStreamLog(s, /listening on/, readyMs)));
  } catch (err) {
    await Promise.all(streams.map((s) => endStream(s, 2000)));
    throw err;
  }
  return { points, streams };
}

/**
 * Stops the captures (after letting the last packets land) and reads every pcap back. A packet
 * time is taken on the capturing machine's clock; clockOffsetUs(ns) (that clock minus this
 * one's) brings it onto this machine's, which the attempts' time windows use (run.ts).
 */
export async function stopCaptures(
  r: Running,
  clockOffsetUs: (ns: string) => number = () => 0,
): Promise<{ point: CapturePoint; packets: Pkt[] }[]> {
  await sleep(300);
  await Promise.all(r.streams.map((s) => endStream(s)));
  return r.points.map((point, i) => {
    const s = r.streams[i]!;
    const pcap = readPcap(new Uint8Array(readFileSync(s.out)), s.out, { ipv6: true });
    checkComplete(point, s, pcap.packets.length);
    const offset = clockOffsetUs(point.ns);
    const packets = pcap.packets.flatMap((p) => {
      const d = decodeIp(p.data, p.tsSec * 1e6 + Math.floor(p.tsNsec / 1000) - offset);
      return d ? [d] : [];
    });
    return { point, packets };
  });
}

/**
 * Every packet tcpdump took is in the pcap, and the kernel dropped none: tcpdump's own count at
 * exit ("N packets captured") against what the pcap holds. A comparison with a packet missing
 * on one side would report a difference that is the capture's, not the data plane's.
 */
function checkComplete(point: CapturePoint, s: Stream, inPcap: number): void {
  const log = readLog(s.log);
  const captured = /(\d+) packets? captured/.exec(log);
  const dropped = /(\d+) packets? dropped by kernel/.exec(log);
  const where = `the capture at ${point.name} (${point.ns})`;
  if (!captured)
    throw new LabError(`${where} did not end cleanly (no tcpdump statistics):\n${tail(s.log)}`);
  if (Number(captured[1]) !== inPcap)
    throw new LabError(
      `${where} lost packets: tcpdump captured ${captured[1]}, the pcap holds ${inPcap}`,
    );
  if (dropped && Number(dropped[1]) > 0)
    throw new LabError(
      `${where}: the kernel dropped ${dropped[1]} packets before tcpdump saw them`,
    );
}
