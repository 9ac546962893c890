// The scratch namespaces of the rules-in-a-real-kernel tests (kernel.test.ts for IPv4,
// kernel-ipv6.test.ts): a client, a node and two backends joined by veths, TCP servers that
// answer with their name and the peer address, and a connect that reports the answer or the
// error code. Each test file lays out its own addresses and routes.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';

export const sh = (cmd: string[], input?: string) =>
  execFileSync(cmd[0], cmd.slice(1), { input, encoding: 'utf8' });
export const inNs = (ns: string, ...cmd: string[]) => sh(['ip', 'netns', 'exec', ns, ...cmd]);

export type Names = { client: string; node: string; be1: string; be2: string };

/** A veth pair a:aIf (aIp) <-> b:bIf (bIp), both up; IPv6 addresses skip duplicate detection. */
export function link(
  a: string,
  aIf: string,
  aIp: string,
  b: string,
  bIf: string,
  bIp: string,
): void {
  sh(['ip', 'link', 'add', aIf, 'netns', a, 'type', 'veth', 'peer', 'name', bIf, 'netns', b]);
  // nodad: IPv6 addresses usable at once, not after duplicate address detection
  const v6 = aIp.includes(':');
  for (const [ns, dev, ip] of [
    [a, aIf, aIp],
    [b, bIf, bIp],
  ])
    inNs(ns, 'ip', ...(v6 ? ['-6'] : []), 'addr', 'add', ip, 'dev', dev, ...(v6 ? ['nodad'] : []));
  inNs(a, 'ip', 'link', 'set', aIf, 'up');
  inNs(b, 'ip', 'link', 'set', bIf, 'up');
}

/** A TCP server on :8080 (all addresses of `listen`'s family) in each backend; resolves when up. */
export function startServers(
  ns: Names,
  servers: ChildProcess[],
  listen: string,
): Promise<unknown[]> {
  for (const [n, name] of [
    [ns.be1, 'be1'],
    [ns.be2, 'be2'],
  ]) {
    const js = `require('net').createServer(s=>s.end('${name} '+s.remoteAddress)).listen(8080,'${listen}',()=>console.log('up'))`;
    const p = spawn('ip', ['netns', 'exec', n, process.execPath, '-e', js], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    servers.push(p);
  }
  return Promise.all(servers.map((p) => new Promise((ok) => p.stdout?.once('data', ok))));
}

/** Connect from a namespace; the backend's answer, or the error code. */
export function connect(from: string, ip: string, port: number): string {
  const js = `const s=require('net').connect(${port},'${ip}');let d='';s.on('data',c=>d+=c);s.on('end',()=>{console.log(d);});s.on('error',e=>console.log(e.code));s.setTimeout(3000,()=>{console.log('TIMEOUT');s.destroy();});`;
  return inNs(from, process.execPath, '-e', js).trim();
}
