import { Command } from 'commander';

const program = new Command();
program
  .name('kubetun')
  .description('A userspace, eBPF-style Kubernetes Service data plane on a Linux TUN device')
  .version('0.1.0');

// Subcommands register themselves from their own modules (src/cli/*.ts) to keep this file short.
const modules = ['./replay.ts', './run.ts', './lab.ts', './rules.ts', './inspect.ts'];
for (const m of modules) {
  try {
    const mod = (await import(m)) as { register?: (p: Command) => void };
    mod.register?.(program);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') throw err;
  }
}

await program.parseAsync(process.argv);
