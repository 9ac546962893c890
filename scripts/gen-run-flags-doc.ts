// Writes docs/run-flags.md from the `kubetun run` option schema (src/node/options.ts RUN_OPTIONS),
// the one place each flag's name, default and help live. test/node/run-schema.test.ts fails when
// the file is out of date: run `npx tsx scripts/gen-run-flags-doc.ts` after changing a flag.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { RUN_OPTION_KEYS, runOptionsTable } from '../src/node/options.ts';

export const RUN_FLAGS_DOC = fileURLToPath(new URL('../docs/run-flags.md', import.meta.url));

export function runFlagsMarkdown(): string {
  return [
    '# `kubetun run` flags',
    '',
    'Generated from `src/node/options.ts` (RUN_OPTIONS) by `scripts/gen-run-flags-doc.ts`; do not',
    'edit. The same entries make `kubetun run --help`, the validation (a bad value is refused',
    "naming its flag, exit 2), the lab's agent command lines and this table. A",
    '`--config` KubeProxyConfiguration file fills the flags the command line leaves out',
    '([cluster.md](cluster.md#configuration-as-kube-proxy-takes-it)).',
    '',
    runOptionsTable(),
  ].join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(RUN_FLAGS_DOC, runFlagsMarkdown());
  console.log(`wrote ${RUN_FLAGS_DOC} (${RUN_OPTION_KEYS.length} flags)`);
}
