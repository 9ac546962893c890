// `lab status`: what the lab is made of and whether each part is alive, as text or JSON.
import { readSupervisor, type SupervisorStatus, supervisorLine } from './supervisor.ts';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UserError } from '../errors.ts';
import { formatTable } from '../inspect/table.ts';
import { renderStaticViewSync } from './control-plane.ts';
import { labCtl } from './ctl.ts';
import { DEFAULT_TOPOLOGY } from './lab.ts';
import { type LabService, readLabServices } from './manifests.ts';
import { isAlive } from './procs.ts';
import { listNetns } from '../sh.ts';
import { type LabMode, type LabProcess, readState, VIEW_DIR } from './state.ts';
import { loadTopology, type Topology } from './topology.ts';

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
    kubetun:
      | (ProcStatus & {
          ctlSocket: string;
          agent: AgentStatus | null;
          /** its supervisor's restarts and give-up (supervisor.ts); null on a VM (systemd) */
          supervisor: SupervisorStatus | null;
        })
      | null;
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
    type: string;
    clusterIP: string;
    externalIPs: string[];
    ports: {
      name: string;
      protocol: string;
      port: number;
      targetPort: number | string;
      nodePort: number;
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

/** The view the data planes read; with no lab up, the one the topology and manifests give. */
export function servedView(t: Topology): string {
  if (existsSync(VIEW_DIR)) return VIEW_DIR;
  const refused: string[] = [];
  const dir = renderStaticViewSync(t, mkdtempSync(join(tmpdir(), 'kubetun-view-')), (m) =>
    refused.push(m),
  );
  if (refused.length > 0) throw new UserError('LAB_MANIFESTS', refused.join('\n'));
  return dir;
}

/** The lab as recorded and as found, without talking to any process. */
export function labStatusOffline(topologyFile?: string): LabStatus {
  const state = readState();
  const t = loadTopology(state?.topologyFile ?? topologyFile ?? DEFAULT_TOPOLOGY);
  const present = new Set(listNetns());
  const proc = (role: LabProcess['role'], name: string) => {
    const p = state?.processes.find((x) => x.role === role && x.name === name);
    if (!p) return null;
    const sup = p.ctlSocket ? readSupervisor(p.ctlSocket) : undefined;
    const supervisor = sup?.pid === p.pid ? sup : null;
    return {
      pid: p.pid,
      alive: isAlive(p),
      log: p.log,
      ctlSocket: p.ctlSocket ?? '',
      agent: null,
      supervisor,
    };
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
  const services = readLabServices(servedView(t)).map((s: LabService) => ({
    namespace: s.namespace,
    name: s.name,
    type: s.type,
    clusterIP: s.clusterIP,
    externalIPs: s.externalIPs,
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

/** `lab status` as text: the lab's health line, then one kubectl-style table per kind. */
export function formatStatus(s: LabStatus): string {
  // A namespace that is gone only matters when the lab is supposed to be there.
  const missing = (present: boolean) =>
    present || s.phase === 'down' ? '' : '  (namespace missing)';
  const proc = (p: { pid: number; alive: boolean } | null) =>
    p ? `pid ${p.pid} ${p.alive ? 'running' : 'DEAD'}` : '-';
  const health = s.up
    ? 'up'
    : s.phase === 'down'
      ? 'down (run: kubetun lab up)'
      : `${s.phase}, not healthy (run: kubetun lab up to repair, or lab down)`;
  const lines = [`lab: ${health}   mode: ${s.mode ?? '-'}   topology: ${s.topology}`, ''];
  const nodes = s.nodes.map((n) => [
    n.name,
    n.ns,
    n.ip,
    n.podCidr,
    n.kubetun
      ? `${proc(n.kubetun)}${agentLine(n.kubetun.agent)}${supervisorLine(n.kubetun.supervisor ?? undefined)}${missing(n.present)}`
      : `-${missing(n.present)}`,
  ]);
  lines.push(...formatTable(['node', 'namespace', 'ip', 'pod cidr', 'kubetun'], nodes), '');
  const pods = s.pods.map((p) => [
    p.name,
    p.node,
    p.ns,
    p.ip,
    p.hostIf,
    `${proc(p.server)}${missing(p.present)}`,
  ]);
  lines.push(...formatTable(['pod', 'node', 'namespace', 'ip', 'veth', 'server'], pods), '');
  const clients = s.clients.map((c) => [
    c.name,
    c.ns,
    c.ip,
    missing(c.present).trim() || 'present',
  ]);
  lines.push(...formatTable(['client', 'namespace', 'ip', 'status'], clients), '');
  lines.push(...formatServices(s.services));
  return lines.join('\n');
}

/**
 * The Services as `kubectl get svc` prints them (NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S)),
 * with the endpoints each port reaches as pod@node.
 */
export function formatServices(services: LabStatus['services']): string[] {
  const rows = services.map((v) => {
    const ports = v.ports.map(
      (p) => `${p.port}${p.nodePort ? `:${p.nodePort}` : ''}/${p.protocol}`,
    );
    const external =
      v.externalIPs.length > 0
        ? v.externalIPs.join(',')
        : v.type === 'LoadBalancer'
          ? '<pending>'
          : '<none>';
    const eps = [
      ...new Set(
        v.ports.flatMap((p) => p.endpoints.map((e) => `${e.pod ?? e.ip}@${e.node ?? '?'}`)),
      ),
    ];
    return [
      `${v.namespace}/${v.name}`,
      v.type,
      v.clusterIP,
      external,
      ports.join(','),
      eps.join(' '),
    ];
  });
  return formatTable(['name', 'type', 'cluster-ip', 'external-ip', 'port(s)', 'endpoints'], rows);
}

function agentLine(a: AgentStatus | null): string {
  if (!a) return '';
  if (a.error) return ` (control socket: ${a.error})`;
  const ifaces = Array.isArray(a.podIfaces) ? a.podIfaces.join(',') : '?';
  return `, ${a.packets ?? '?'} packets, ${a.servicePorts ?? '?'} service ports, TUN ${a.tun ?? '?'}, hooks on ${ifaces}`;
}
