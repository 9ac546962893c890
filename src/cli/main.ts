import { Command } from 'commander';
import { register as registerInspect } from './inspect.ts';
import { register as registerLab } from './lab.ts';
import { register as registerProvision } from './provision.ts';
import { register as registerReplay } from './replay.ts';
import { register as registerRules } from './rules.ts';
import { register as registerRun } from './run.ts';

// `kubetun ct list | head` closes our stdout early: that is the reader's choice, not an error.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

const program = new Command();
program
  .name('kubetun')
  .description('A userspace, eBPF-style Kubernetes Service data plane on a Linux TUN device')
  .version('0.1.0');

// Each subcommand lives in its own module (src/cli/*.ts) to keep this file short.
for (const register of [
  registerRun,
  registerLab,
  registerProvision,
  registerReplay,
  registerRules,
  registerInspect,
]) {
  register(program);
}

await program.parseAsync(process.argv);
