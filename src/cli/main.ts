import { Command, CommanderError } from 'commander';
import { reportError } from '../errors.ts';
import { BUNDLED } from '../runtime.ts';
import { register as registerCleanup } from './cleanup.ts';
import { register as registerInspect } from './inspect.ts';
import { register as registerLab } from './lab.ts';
import { register as registerObserve } from './observe.ts';
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
  // how this copy runs (src/runtime.ts): the prebuilt bundle, or the sources through tsx
  .version(`0.1.0 (${BUNDLED ? 'bundle: build/js' : 'sources: tsx'})`)
  .option('--debug', 'print the stack of an error too')
  // Set before the subcommands are registered, so every subcommand inherits it: a usage
  // mistake (unknown command or option, missing argument) is commander's line, its "Did you
  // mean" or our pointer to --help, and exit status 2, as every user mistake (src/errors.ts).
  .exitOverride();

// The full name of the command running ("lab up", "ct list"), for error messages.
let running = '';
program.hook('preAction', (_self, action) => {
  const names: string[] = [];
  for (let c: Command | null = action; c && c !== program; c = c.parent) names.unshift(c.name());
  running = names.join(' ');
});

// Each subcommand lives in its own module (src/cli/*.ts) to keep this file short.
for (const register of [
  registerRun,
  registerLab,
  registerProvision,
  registerReplay,
  registerRules,
  registerInspect,
  registerObserve,
  registerCleanup,
]) {
  register(program);
}

// --debug anywhere before a `--` (after it, the words belong to `lab exec`'s command).
const dash = process.argv.indexOf('--');
const debug =
  process.env.KUBETUN_DEBUG === '1' ||
  process.argv.slice(0, dash < 0 ? undefined : dash).includes('--debug');

try {
  await program.parseAsync(process.argv);
} catch (err) {
  if (err instanceof CommanderError) {
    // commander printed its message (or the help) already.
    process.exitCode = err.exitCode === 0 ? 0 : 2;
    if (err.exitCode !== 0 && err.code !== 'commander.help' && !/Did you mean/.test(err.message))
      process.stderr.write('(add --help to see the commands and flags)\n');
  } else {
    process.exitCode = reportError(err, running, debug);
  }
}
