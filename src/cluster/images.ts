// What a container image means in the lab: no image is pulled, each name maps to one of the
// lab's own servers, run in the Pod's network namespace on the ports the Pod declares.
//
//   image                        server                                           ready when
//   *coredns*, kubetun/dns       the cluster DNS server (src/cluster/dns/) on      it listens
//                                <podIP>:53 UDP+TCP, reading the view directory;
//                                the container's args are its flags
//   kubetun/pause                nothing (a process that sleeps): the Pod's           at once
//                                namespace is there for what you run in it
//   kubetun/slow-start           lab/servers/echo.mjs, /ready 503 for the first    /ready says so
//                                READY_AFTER_SECONDS (env, default 10) seconds
//   anything else (nginx, ...)   lab/servers/echo.mjs: HTTP on every declared TCP  it listens
//                                port, UDP echo on every declared UDP port; no
//                                ports declared: HTTP 8080 + UDP 5353
//
// The echo server answers "<pod> <ip>" on GET / and on any datagram, serves /ready (200, or 503
// after GET /unready until GET /make-ready) for httpGet readiness probes, and exits at once on
// SIGTERM — as most applications do, which is why Services need preStop hooks.
import { join } from 'node:path';
import { entryArgv, REPO_ROOT } from '../runtime.ts';
import type { Container, Pod } from './types.ts';

export const ECHO_SERVER = join(REPO_ROOT, 'lab/servers/echo.mjs');

export type ServerKind = 'echo' | 'dns' | 'pause';

export interface ServerPlan {
  kind: ServerKind;
  argv: string[];
  /** a log line that says the server listens (undefined: running once started) */
  readyLine?: RegExp;
}

export interface ServerContext {
  podIP: string;
  /** a dual-stack Pod's IPv6 address: the echo server listens on it too */
  podIP6?: string;
  /** the view directory the DNS server reads */
  viewDir: string;
  node?: string;
}

export function isDnsImage(image: string | undefined): boolean {
  return /coredns/.test(image ?? '') || /^kubetun\/dns(:|$)/.test(image ?? '');
}

/** The server of the Pod's first container (the lab runs one server per Pod). */
export function serverFor(pod: Pod, c: ServerContext): ServerPlan {
  const container = pod.spec.containers[0]!;
  const node = c.node ?? process.execPath;
  if (isDnsImage(container.image)) {
    const argv = [
      node,
      ...entryArgv('dns-server'),
      '--dir',
      c.viewDir,
      '--listen',
      `${c.podIP}:53`,
      // the container's args are the server's own flags (--upstream, --log, --delay-ms): what
      // CoreDNS reads from its Corefile (forward ., log)
      ...(container.args ?? []),
    ];
    return { kind: 'dns', argv, readyLine: /^cluster-dns: serving /m };
  }
  if (/^kubetun\/pause(:|$)/.test(container.image ?? ''))
    return { kind: 'pause', argv: ['sleep', 'infinity'] };
  const argv = [node, ECHO_SERVER, '--name', pod.metadata.name, '--ip', c.podIP];
  if (c.podIP6) argv.push('--ip6', c.podIP6);
  for (const p of declaredPorts(pod))
    argv.push(p.protocol === 'UDP' ? '--udp' : '--http', String(p.containerPort));
  const after = readyAfter(container);
  if (after > 0) argv.push('--ready-after', String(after));
  return { kind: 'echo', argv, readyLine: /^ready /m };
}

/** Every port any container declares (the lab runs them in one server). */
export function declaredPorts(pod: Pod): { containerPort: number; protocol: string }[] {
  return pod.spec.containers.flatMap((c) =>
    (c.ports ?? []).map((p) => ({ containerPort: p.containerPort, protocol: p.protocol ?? 'TCP' })),
  );
}

function readyAfter(c: Container): number {
  if (!/^kubetun\/slow-start(:|$)/.test(c.image ?? '')) return 0;
  const env = ((c.env as { name: string; value?: string }[] | undefined) ?? []).find(
    (e) => e.name === 'READY_AFTER_SECONDS',
  );
  const n = Number(env?.value ?? 10);
  return Number.isFinite(n) && n >= 0 ? n : 10;
}
