// `lab status`: what the lab is made of and whether each part is alive, as text or JSON.
import { labCtl } from './ctl.ts';
import { DEFAULT_TOPOLOGY } from './lab.ts';
import { type LabService, readLabServices } from './manifests.ts';
import { isAlive } from './procs.ts';
import { listNetns } from './sh.ts';
import { type LabMode, type LabProcess, readState } from './state.ts';
import { loadTopology } from './topology.ts';

export interface ProcStatus {
  pid: number;
  alive: boolean;
  log: string;
}

/** What the node's kubetun says about itself ({"cmd":"status"}), or why it did not answer. */
export type AgentStatus = Record<string, unknown> & { error?: string };

export interface LabStatus {
  up: boolean;
  /** 'building' means lab up was interrupted: run lab down */
  phase: 'down' | 'building' | 'up';
  mode: LabMode | null;
  topology: string;
  nodes: {
    name: string;
    ns: string;
    ip: string;
    podCidr: string;
    uplink: string;
    present: boolean;
    kubetun: (ProcStatus & { ctlSocket: string; agent: AgentStatus | null }) | null;
  }[];
  pods: {
    name: string;
    node: string;
    ns: string;
    ip: string;
    hostIf: string;
    present: boolean;
    server: ProcStatus | null;
  }[];
  clients: { name: string; ns: string; ip: string; present: boolean }[];
  services: {
    namespace: string;
    name: string;
    clusterIP: string;
    ports: {
      name: string;
      protocol: string;
      port: number;
      targetPort: number | string;
      endpoints: { ip: string; port: number; pod: string | null; node: string | null }[];
    }[];
  }[];
}

/** The lab as recorded and as found, with each live kubetun asked for its own status. */
export async function labStatus(topologyFile?: string): Promise<LabStatus> {
  const s = labStatusOffline(topologyFile);
  await Promise.all(
    s.nodes.map(async (n) => {
      if (!n.kubetun?.alive) return;
      try {
        n.kubetun.agent = await labCtl(n.kubetun.ctlSocket, { cmd: 'status' }, 2000);
      } catch (err) {
        n.kubetun.agent = { error: (err as Error).message };
      }
    }),
  );
  return s;
}

/** The lab as recorded and as found, without talking to any process. */
export function labStatusOffline(topologyFile?: string): LabStatus {
  const state = readState();
  const t = loadTopology(state?.topologyFile ?? topologyFile ?? DEFAULT_TOPOLOGY);
  const present = new Set(listNetns());
  const proc = (role: LabProcess['role'], name: string) => {
    const p = state?.processes.find((x) => x.role === role && x.name === name);
    return p
      ? { pid: p.pid, alive: isAlive(p), log: p.log, ctlSocket: p.ctlSocket ?? '', agent: null }
      : null;
  };
  const nodes = t.nodes.map((n) => ({
    name: n.name,
    ns: n.ns,
    ip: n.ip,
    podCidr: n.podCidr,
    uplink: n.uplink,
    present: present.has(n.ns),
    kubetun: proc('kubetun', n.name),
  }));
  const pods = t.nodes.flatMap((n) =>
    n.pods.map((p) => {
      const s = proc('server', p.name);
      const server = s ? { pid: s.pid, alive: s.alive, log: s.log } : null;
      return {
        name: p.name,
        node: n.name,
        ns: p.ns,
        ip: p.ip,
        hostIf: p.hostIf,
        present: present.has(p.ns),
        server,
      };
    }),
  );
  const clients = t.clients.map((c) => ({
    name: c.name,
    ns: c.ns,
    ip: c.ip,
    present: present.has(c.ns),
  }));
  const podOf = new Map(pods.map((p) => [p.ip, p]));
  const services = readLabServices(t.manifests).map((s: LabService) => ({
    namespace: s.namespace,
    name: s.name,
    clusterIP: s.clusterIP,
    ports: s.ports.map((p) => ({
      ...p,
      endpoints: p.endpoints.map((e) => ({
        ip: e.ip,
        port: e.port,
        pod: podOf.get(e.ip)?.name ?? null,
        node: podOf.get(e.ip)?.node ?? null,
      })),
    })),
  }));
  const allThere =
    [...nodes, ...pods, ...clients].every((x) => x.present) &&
    (state?.processes ?? []).every((p) => isAlive(p));
  const phase = state ? state.phase : 'down';
  return {
    up: phase === 'up' && allThere,
    phase,
    mode: state?.mode ?? null,
    topology: t.file,
    nodes,
    pods,
    clients,
    services,
  };
}

export function formatStatus(s: LabStatus): string {
  // A namespace that is gone only matters when the lab is supposed to be there.
  const missing = (present: boolean) =>
    present || s.phase === 'down' ? '' : '  (namespace missing)';
  const lines = [
    `lab: ${s.up ? 'up' : s.phase === 'down' ? 'down' : `${s.phase}, not healthy (run: kubetun lab down)`}   mode: ${s.mode ?? '-'}   topology: ${s.topology}`,
    '',
  ];
  lines.push('NODE      NAMESPACE    IP             POD CIDR         KUBETUN');
  for (const n of s.nodes) {
    const k = n.kubetun
      ? `pid ${n.kubetun.pid} ${n.kubetun.alive ? 'running' : 'DEAD'}${agentLine(n.kubetun.agent)}`
      : '-';
    lines.push(
      `${pad(n.name, 9)} ${pad(n.ns, 12)} ${pad(n.ip, 14)} ${pad(n.podCidr, 16)} ${k}${missing(n.present)}`,
    );
  }
  lines.push('', 'POD       NODE      NAMESPACE    IP             VETH          SERVER');
  for (const p of s.pods) {
    const srv = p.server ? `pid ${p.server.pid} ${p.server.alive ? 'running' : 'DEAD'}` : '-';
    lines.push(
      `${pad(p.name, 9)} ${pad(p.node, 9)} ${pad(p.ns, 12)} ${pad(p.ip, 14)} ${pad(p.hostIf, 13)} ${srv}${missing(p.present)}`,
    );
  }
  lines.push('', 'CLIENT    NAMESPACE    IP');
  for (const c of s.clients)
    lines.push(`${pad(c.name, 9)} ${pad(c.ns, 12)} ${pad(c.ip, 14)} ${missing(c.present)}`);
  lines.push('', 'SERVICE            CLUSTER-IP     PORT         ENDPOINTS');
  for (const v of s.services) {
    for (const p of v.ports) {
      const eps = p.endpoints.map((e) => `${e.pod ?? e.ip}@${e.node ?? '?'}`).join(' ') || '<none>';
      lines.push(
        `${pad(`${v.namespace}/${v.name}`, 18)} ${pad(v.clusterIP, 14)} ${pad(`${p.port}/${p.protocol}->${p.targetPort}`, 12)} ${eps}`,
      );
    }
  }
  return lines.join('\n');
}

function agentLine(a: AgentStatus | null): string {
  if (!a) return '';
  if (a.error) return ` (control socket: ${a.error})`;
  const ifaces = Array.isArray(a.podIfaces) ? a.podIfaces.join(',') : '?';
  return `, ${a.packets ?? '?'} packets, ${a.servicePorts ?? '?'} service ports, TUN ${a.tun ?? '?'}, hooks on ${ifaces}`;
}

function pad(s: string, n: number): string {
  return s.length >= n ? s : s + ' '.repeat(n - s.length);
}
