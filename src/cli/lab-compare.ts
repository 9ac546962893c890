// `kubetun lab compare`: kubetun against kube-proxy's kernel rules, packet by packet, on the
// namespace lab of this machine or (--vms) on the Vagrant lab's VMs (src/lab/compare/).
import { writeFileSync } from 'node:fs';
import { type Command, Option } from 'commander';
import { requireRoot } from '../errors.ts';
import type { CompareReport } from '../lab/compare/run.ts';
import type { Scenario } from '../lab/compare/scenarios.ts';

const progress = (msg: string) => process.stderr.write(`lab: ${msg}\n`);

type Guarded = (what: string, fn: () => Promise<void> | void) => Promise<void>;

interface Flags {
  topology: string;
  kernel: 'iptables' | 'nftables';
  html?: string;
  json?: boolean;
  list?: boolean;
  kubetunFirst?: boolean;
  vms?: string;
}

export function registerCompare(lab: Command, guarded: Guarded, topo: () => Option): void {
  lab
    .command('compare [scenario...]')
    .description(
      "run scenarios with kube-proxy's kernel rules and with kubetun on the same lab, capture at the same points and diff packet by packet (exit 1 on any difference)",
    )
    .addOption(topo())
    .addOption(
      new Option('--kernel <mode>', 'the kube-proxy mode to compare with')
        .choices(['iptables', 'nftables'])
        .default('nftables'),
    )
    .option('--html <file>', 'also write a self-contained HTML report with ladder diagrams')
    .option('--json', 'print the report as JSON')
    .option('--list', 'list the scenarios and exit (with --vms: which run on the VMs)')
    .option(
      '--kubetun-first',
      "run kubetun first; its backend choices become the kernel run's targets",
    )
    .option(
      '--vms <ssh-config>',
      'compare on the Vagrant lab: its VMs, reached by ssh with this config (vagrant ssh-config > FILE; default $KUBETUN_LAB_VMS)',
    )
    .action((names: string[], o: Flags) =>
      guarded('compare', async () => {
        const { VMS_ENV } = await import('../lab/prefix.ts');
        o.vms ??= process.env[VMS_ENV] || undefined;
        const { findScenarios, SCENARIOS } = await import('../lab/compare/scenarios.ts');
        if (o.list) return listScenarios(SCENARIOS, o.vms !== undefined);
        const scenarios = findScenarios(names);
        const r = o.vms ? await onVms(o.vms, scenarios, o) : await onNamespaces(scenarios, o);
        if (o.html) {
          const { renderHtml } = await import('../lab/compare/html.ts');
          writeFileSync(o.html, renderHtml(r));
          progress(`wrote ${o.html}`);
        }
        const { formatReport } = await import('../lab/compare/report.ts');
        process.stdout.write(o.json ? `${JSON.stringify(r, null, 2)}\n` : `${formatReport(r)}\n`);
        if (r.differences > 0) process.exitCode = 1;
      }),
    );
}

async function listScenarios(all: readonly Scenario[], vms: boolean): Promise<void> {
  const { vmRefusal } = await import('../lab/compare/vm-lab.ts');
  const width = Math.max(...all.map((s) => s.name.length));
  for (const s of all) {
    const why = vms ? vmRefusal(s) : undefined;
    const where = vms ? (why ? 'no ' : 'yes') : '';
    process.stdout.write(`${s.name.padEnd(width)} ${where ? `${where}  ` : ''}${s.title}\n`);
    if (why) process.stdout.write(`${''.padEnd(width + 6)}not on the VMs: ${why}\n`);
  }
}

async function onNamespaces(scenarios: Scenario[], o: Flags): Promise<CompareReport> {
  requireRoot('lab compare');
  const { labCompare } = await import('../lab/compare/run.ts');
  const opts = { kernel: o.kernel, topology: o.topology, progress, kubetunFirst: o.kubetunFirst };
  return labCompare(scenarios, opts);
}

async function onVms(config: string, scenarios: Scenario[], o: Flags): Promise<CompareReport> {
  const { readSshConfig } = await import('../lab/vms.ts');
  const { sshMachines } = await import('../lab/machines.ts');
  const { openVmLab } = await import('../lab/compare/vm-lab.ts');
  const { labCompare } = await import('../lab/compare/run.ts');
  const hosts = readSshConfig(config);
  const lab = await openVmLab({
    machines: sshMachines(config),
    hosts,
    name: `the VM lab (${hosts.join(', ')}; ssh -F ${config})`,
    progress,
  });
  try {
    return await labCompare(scenarios, {
      kernel: o.kernel,
      progress,
      kubetunFirst: o.kubetunFirst,
      lab,
    });
  } finally {
    lab.close();
  }
}
