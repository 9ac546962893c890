// `kubetun lab exercise ...` and `kubetun lab agent ...`: the troubleshooting exercises
// (lab/exercises/, src/lab/exercise/) and the node data-plane repair they need — on the
// namespace lab, or with --vms (KUBETUN_LAB_VMS) on the Vagrant VMs (src/lab/exercise/select.ts).
import { type Command, Option } from 'commander';
import { UsageError } from '../errors.ts';
import { LAB_MODES, type LabMode } from '../lab/state.ts';

/** `--vms CONFIG` (cli/lab.ts's hook turns it into KUBETUN_LAB_VMS before the action runs). */
export const vmsOption = () =>
  new Option(
    '--vms <ssh-config>',
    'on the Vagrant lab: its VMs, reached by ssh with this config (vagrant ssh-config > FILE); the same as KUBETUN_LAB_VMS=FILE, which the fix commands inherit',
  );

const progress = (msg: string) => process.stderr.write(`lab: ${msg}\n`);
const out = (s: string): void => void process.stdout.write(s.endsWith('\n') ? s : `${s}\n`);

type Guarded = (what: string, fn: () => Promise<void> | void) => Promise<void>;

export function registerExercise(lab: Command, guarded: Guarded): void {
  const ex = lab
    .command('exercise')
    .description('troubleshooting exercises: list, start NAME, hint, check, solution, reset');

  ex.command('list')
    .description(
      'every exercise in learning order, with what is done (--vms: which run on the VMs, and why not the others)',
    )
    .option('--json', 'print JSON')
    .addOption(vmsOption())
    .action((o: { json?: boolean }) =>
      guarded('exercise list', async () => {
        const { exerciseList } = await import('../lab/exercise/run.ts');
        const l = exerciseList();
        if (o.json) return out(JSON.stringify(l, null, 2));
        const mark = { done: '✓', active: '▶', open: ' ', waiting: '…' } as const;
        for (const e of l) {
          const waits = e.waitsOn.length ? `  (waits on the lab's ${e.waitsOn.join(', ')})` : '';
          const not = e.notHere ? ' ✗' : '';
          out(
            `${mark[e.state]} ${e.name.padEnd(24)} ${String(e.minutes).padStart(3)} min  ${e.title}${waits}${not}`,
          );
          if (e.notHere) out(`${''.padEnd(35)}not here: ${e.notHere}`);
        }
        const done = l.filter((e) => e.done).length;
        const here = l.filter((e) => !e.notHere).length;
        const runs = here < l.length ? ` ${here} of ${l.length} run here (✗: not here).` : '';
        out(`\n${done} of ${l.length} done.${runs} Start one: kubetun lab exercise start NAME`);
      }),
    );

  ex.command('start <name>')
    .addOption(vmsOption())
    .description('break the lab as the exercise says and print the symptom')
    .addOption(
      new Option('--mode <mode>', "data plane (default: the exercise's first)").choices(
        LAB_MODES as LabMode[],
      ),
    )
    .action((name: string, o: { mode?: LabMode }) =>
      guarded('exercise start', async () => {
        const { exerciseStart } = await import('../lab/exercise/run.ts');
        const { exerciseLab } = await import('../lab/exercise/select.ts');
        const lab = exerciseLab();
        const e = await exerciseStart(name, o.mode, progress, lab);
        out(`\n${e.title}  (about ${e.minutes} min)\n\n${e.symptom}\n`);
        // on the VMs only lab exec reaches inside (status, ct and svc read this machine's lab)
        const tools = lab.lacks['agent-socket']
          ? 'kubetun lab exec'
          : 'kubetun lab exec/status, kubetun ct/svc';
        out(`Investigate with ${tools}; then: kubetun lab exercise check`);
        out(`(${e.hints.length} hints: kubetun lab exercise hint)`);
      }),
    );

  ex.command('status')
    .addOption(vmsOption())
    .description('the active exercise and what is done')
    .option('--json', 'print JSON')
    .action((o: { json?: boolean }) =>
      guarded('exercise status', async () => {
        const { exerciseStatus } = await import('../lab/exercise/run.ts');
        const s = exerciseStatus();
        if (o.json) return out(JSON.stringify(s, null, 2));
        out(
          s.active
            ? `active: ${s.active.name} (mode ${s.active.mode}, started ${s.active.startedAt}, ${s.active.hintsShown}/${s.active.hints} hints)`
            : 'no exercise is active',
        );
        out(
          `done: ${s.done.length} of ${s.total}${s.done.length ? ` (${s.done.join(', ')})` : ''}`,
        );
      }),
    );

  ex.command('hint')
    .addOption(vmsOption())
    .description('the next hint, following the runbook from Service to tcpdump')
    .action(() =>
      guarded('exercise hint', async () => {
        const { exerciseHint } = await import('../lab/exercise/run.ts');
        const h = exerciseHint();
        out(`hint ${h.n}/${h.of}: ${h.hint.trim()}`);
      }),
    );

  ex.command('check')
    .addOption(vmsOption())
    .description('what holds and what does not yet (exit 1 while unsolved)')
    .option(
      '--answer <id=value>',
      'answer a question (repeatable)',
      (v: string, acc: string[]) => [...acc, v],
      [] as string[],
    )
    .option('--json', 'print JSON')
    .action((o: { answer: string[]; json?: boolean }) =>
      guarded('exercise check', async () => {
        const { exerciseCheck } = await import('../lab/exercise/run.ts');
        const r = await exerciseCheck(o.answer);
        if (o.json) out(JSON.stringify(r, null, 2));
        else {
          for (const i of r.items) out(`${i.ok ? '✓' : '✗'} ${i.title}\n    ${i.detail}`);
          out(r.solved ? `\n${r.exercise}: solved.` : `\n${r.exercise}: not yet.`);
        }
        if (!r.solved) process.exitCode = 1;
      }),
    );

  ex.command('solution')
    .addOption(vmsOption())
    .description('the cause, the evidence to look for, and the fix — which it then applies')
    .option('--no-apply', 'only show it')
    .option('--json', 'print JSON (never applies)')
    .action((o: { apply: boolean; json?: boolean }) =>
      guarded('exercise solution', async () => {
        const { exerciseSolution, runFixCommand } = await import('../lab/exercise/run.ts');
        const e = exerciseSolution();
        if (o.json) return out(JSON.stringify({ exercise: e.name, ...e.solution }, null, 2));
        out(`${e.title}\n\nCause:\n${indent(e.solution.cause)}\n\nEvidence:`);
        for (const ev of e.solution.evidence) out(`  $ ${ev.run}\n${indent(ev.saw, 4)}`);
        out(`\nFix:\n${e.solution.fix.map((c) => `  $ ${c}`).join('\n')}`);
        if (!o.apply) return;
        out('\nApplying the fix:');
        for (const c of e.solution.fix) {
          out(`  $ ${c}`);
          const r = runFixCommand(c);
          if (r.out.trim()) out(indent(r.out.trimEnd(), 4));
          if (r.status !== 0) {
            out(`  (exit ${r.status})`);
            process.exitCode = 1;
            return;
          }
        }
        out('\nNow: kubetun lab exercise check');
      }),
    );

  ex.command('objects')
    .addOption(vmsOption())
    .description(
      "the directory of the exercise lab's Service/EndpointSlice files (edit them there)",
    )
    .action(() =>
      guarded('exercise objects', async () => {
        const { exerciseLab } = await import('../lab/exercise/select.ts');
        const lab = exerciseLab();
        if (lab.lacks['control-plane'])
          throw new UsageError(`${lab.name} has no object files: ${lab.lacks['control-plane']}`);
        out(lab.objectsDir());
      }),
    );

  ex.command('reset')
    .addOption(vmsOption())
    .description('undo the exercise: the lab as lab up made it')
    .action(() =>
      guarded('exercise reset', async () => {
        const { exerciseReset } = await import('../lab/exercise/run.ts');
        const did = await exerciseReset(progress);
        out(did.length ? did.join('\n') : 'nothing to undo');
      }),
    );

  lab
    .command('agent <action> <node> [flags...]')
    .description(
      "a node's data plane: restart NODE [-- FLAGS] (kubetun run flags, kept for later restarts; none: keep), crash NODE (SIGKILL, as the OOM killer would)",
    )
    .option('--clear', 'restart with no extra flags')
    .addOption(vmsOption())
    .action((action: string, node: string, flags: string[], o: { clear?: boolean }) =>
      guarded('agent', async () => {
        if (action !== 'crash' && action !== 'restart')
          throw new UsageError(`lab agent: unknown action "${action}" (restart, crash)`);
        // the exercises' lab: the namespace lab, or the VMs' kubetun.service (KUBETUN_LAB_VMS)
        const { exerciseLab } = await import('../lab/exercise/select.ts');
        const lab = exerciseLab();
        if (action === 'crash') return lab.crashAgent(node);
        const keep = await lab.restartAgent(
          node,
          o.clear ? [] : flags.length ? flags : undefined,
          progress,
        );
        out(
          `kubetun on ${node} runs${keep.length ? ` with ${keep.join(' ')}` : ' with no extra flags'}`,
        );
      }),
    );
}

function indent(s: string, n = 2): string {
  return s
    .trimEnd()
    .split('\n')
    .map((l) => `${' '.repeat(n)}${l}`)
    .join('\n');
}
