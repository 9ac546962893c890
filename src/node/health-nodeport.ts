// Health-check node ports (pkg/proxy/healthcheck/service_health.go): for every service with
// externalTrafficPolicy: Local and a spec.healthCheckNodePort, an HTTP server on this node's IP
// tells an external load balancer whether this node has local endpoints:
//
//   200  {"service":{"namespace":"ns","name":"svc"},"localEndpoints":N,"serviceProxyHealthy":true}
//        X-Load-Balancing-Endpoint-Weight: N
//   503  the same body with localEndpoints 0 (the load balancer then skips this node)
//
// kube-proxy counts the service's ready local endpoints (src/endpoints/select.ts; terminating
// ones never count), once per endpoint whatever the number of ports. Servers follow the manifests on every
// sync: new ports are opened, gone ones closed, counts updated in place.
//
// Per family, as kube-proxy's proxier of each family runs its own server on that family's node
// IP (nodePortAddresses "primary"): one HealthNodePorts on --node-ip for the services with an
// IPv4 ClusterIP, counting IPv4 endpoints, and with --node-ip-v6 one on the node's IPv6
// address for those with an IPv6 ClusterIP, counting IPv6 endpoints (the IPv6 EndpointSlices,
// `endpoints6`). A dual-stack service answers on both, each with its own family's count.
import { createServer, type Server } from 'node:http';
import type { Logger } from 'pino';
import { localReadyAddresses } from '../endpoints/select.ts';
import { hasFamily, type IPFamily, type ResolvedServicePort } from '../model.ts';

export interface HealthService {
  namespace: string;
  name: string;
  port: number;
  localEndpoints: number;
}

/**
 * The health-check node ports the manifests ask for on this node in `family` (the services with
 * a ClusterIP of it), with that family's local counts.
 */
export function healthServices(
  ports: readonly ResolvedServicePort[],
  nodeName: string,
  family: IPFamily = 'IPv4',
): HealthService[] {
  const byPort = new Map<number, HealthService & { ips: Set<string> }>();
  for (const rsp of ports) {
    const svc = rsp.service;
    if (svc.externalTrafficPolicy !== 'Local' || svc.healthCheckNodePort === 0) continue;
    if (!hasFamily(svc.clusterIPs, family)) continue;
    const endpoints = family === 'IPv4' ? rsp.endpoints : (rsp.endpoints6 ?? []);
    let h = byPort.get(svc.healthCheckNodePort);
    if (!h) {
      const { namespace, name } = svc;
      h = { namespace, name, port: svc.healthCheckNodePort, localEndpoints: 0, ips: new Set() };
      byPort.set(h.port, h);
    }
    for (const ip of localReadyAddresses(endpoints, nodeName)) h.ips.add(ip);
  }
  return [...byPort.values()].map(({ ips, ...h }) => ({ ...h, localEndpoints: ips.size }));
}

/** kube-proxy's answer for one service: status, headers, body. */
export function healthAnswer(h: HealthService): {
  status: number;
  headers: Record<string, string>;
  body: string;
} {
  const body = JSON.stringify({
    service: { namespace: h.namespace, name: h.name },
    localEndpoints: h.localEndpoints,
    serviceProxyHealthy: true,
  });
  const headers: Record<string, string> = {
    'Content-Type': 'application/json',
    'X-Content-Type-Options': 'nosniff',
  };
  if (h.localEndpoints > 0) {
    headers['X-Load-Balancing-Endpoint-Weight'] = String(h.localEndpoints);
  }
  return { status: h.localEndpoints > 0 ? 200 : 503, headers, body };
}

export class HealthNodePorts {
  private readonly servers = new Map<number, { server: Server; h: HealthService }>();

  constructor(
    private readonly host: string,
    private readonly log: Logger,
  ) {}

  /** The ports being served (tests, status). */
  get ports(): number[] {
    return [...this.servers.keys()].sort((a, b) => a - b);
  }

  private chain: Promise<void> = Promise.resolve();

  /** Open, update and close servers to match `wanted` (one sync at a time; bind errors logged). */
  sync(wanted: readonly HealthService[]): Promise<void> {
    this.chain = this.chain.then(() => this.syncNow(wanted));
    return this.chain;
  }

  private async syncNow(wanted: readonly HealthService[]): Promise<void> {
    const keep = new Set(wanted.map((h) => h.port));
    for (const [port, s] of this.servers) {
      if (keep.has(port)) continue;
      this.servers.delete(port);
      await closeServer(s.server);
    }
    for (const h of wanted) {
      const have = this.servers.get(h.port);
      if (have) {
        have.h = h;
        continue;
      }
      const entry = { server: createServer(), h };
      entry.server.on('request', (_req, res) => {
        const a = healthAnswer(entry.h);
        res.writeHead(a.status, a.headers);
        res.end(a.body);
      });
      try {
        await listen(entry.server, h.port, this.host);
        // a listening server's later error (EMFILE on accept...) would otherwise be an
        // uncaught 'error' event, and end the agent
        entry.server.on('error', (err) =>
          this.log.warn({ port: h.port, err: err.message }, 'health-check node port error'),
        );
        this.servers.set(h.port, entry);
        this.log.info(
          { port: h.port, service: `${h.namespace}/${h.name}` },
          'health-check node port',
        );
      } catch (err) {
        this.log.warn(
          { port: h.port, err: (err as Error).message },
          'health-check node port not served',
        );
      }
    }
  }

  async close(): Promise<void> {
    await this.sync([]);
  }
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });
}
