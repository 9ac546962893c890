// `kubetun cleanup`: remove everything kubetun installed on this node (src/node/cleanup.ts), and
// with --kube-proxy kube-proxy's rules too — the step between running one proxy and the other.
import type { Command } from 'commander';
import { requireRoot } from '../errors.ts';
import { cleanupNode } from '../node/cleanup.ts';

export function register(program: Command): void {
  program
    .command('cleanup')
    .description(
      "remove kubetun's steering, TUN and state from this node (like kube-proxy --cleanup)",
    )
    .option('--ctl-dir <dir>', "the agents' control socket directory", '/run/kubetun')
    .option('--tun <name>', 'TUN device name', 'kt0')
    .option('--kube-proxy', "also remove kube-proxy's iptables chains and nftables tables")
    .option('--json', 'print what was removed as JSON')
    .action(async (f: { ctlDir: string; tun: string; kubeProxy?: boolean; json?: boolean }) => {
      requireRoot('cleanup');
      const r = await cleanupNode({
        ctlDir: f.ctlDir,
        tun: f.tun,
        kubeProxy: f.kubeProxy === true,
      });
      if (f.json) {
        process.stdout.write(`${JSON.stringify(r)}\n`);
        return;
      }
      for (const s of r.stateFiles) {
        const what = s.refused
          ? `not trusted, nothing run: ${s.refused}`
          : `${s.steps} undo steps replayed (${s.failed} already gone)`;
        console.log(`state ${s.file}: ${what}`);
      }
      for (const s of r.swept) console.log(`tc filter ${s}: removed`);
      if (r.tunRemoved) console.log(`link ${f.tun}: removed`);
      for (const s of r.sockets) console.log(`socket ${s}: removed`);
      for (const s of r.pinned) console.log(`pinned ${s}: removed`);
      for (const k of r.kubeProxy) console.log(`kube-proxy ${k}: removed`);
      const n =
        r.stateFiles.length +
        r.swept.length +
        r.sockets.length +
        r.pinned.length +
        r.kubeProxy.length;
      if (n === 0 && !r.tunRemoved) console.log('nothing of kubetun on this node');
    });
}
