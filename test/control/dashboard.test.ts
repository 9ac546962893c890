// docs/grafana/kubetun-dataplane.json and the PromQL of docs/observability.md name only metrics
// the agent really exports (ProxyMetrics' registry): a renamed metric breaks this test, not a
// user's dashboard. And the ring's metrics carry what the datapath hook reports.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ProxyMetrics } from '../../src/control/metrics.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const METRIC = /\b(?:kubetun|kubeproxy)_[a-z_]+\b/g;

/** Exported series names: each metric, and a histogram's _bucket/_sum/_count. */
async function exported(): Promise<Set<string>> {
  const m = new ProxyMetrics();
  const names = new Set<string>();
  for (const x of await m.registry.getMetricsAsJSON()) {
    names.add(x.name);
    if (String(x.type) === 'histogram')
      for (const s of ['_bucket', '_sum', '_count']) names.add(x.name + s);
  }
  return names;
}

function dashboardExprs(): string[] {
  const d = JSON.parse(readFileSync(join(ROOT, 'docs/grafana/kubetun-dataplane.json'), 'utf8'));
  const exprs: string[] = [];
  for (const p of d.panels) for (const t of p.targets ?? []) exprs.push(t.expr);
  for (const v of d.templating.list)
    if (typeof v.query === 'string' && v.type === 'query') exprs.push(v.query);
  return exprs;
}

function docExprs(): string[] {
  const md = readFileSync(join(ROOT, 'docs/observability.md'), 'utf8');
  return [...md.matchAll(/```promql\n([\s\S]*?)```/g)].map((m) => m[1]!);
}

describe('dashboard and PromQL examples', () => {
  it('every metric the dashboard queries is exported', async () => {
    const names = await exported();
    const exprs = dashboardExprs();
    expect(exprs.length).toBeGreaterThan(5);
    const used = new Set(exprs.flatMap((e) => e.match(METRIC) ?? []));
    expect(used).toContain('kubetun_monitor_lost_events_total');
    expect([...used].filter((n) => !names.has(n))).toEqual([]);
  });

  it('every metric the docs PromQL examples use is exported', async () => {
    const names = await exported();
    const exprs = docExprs();
    expect(exprs.length).toBeGreaterThan(3);
    const used = new Set(exprs.flatMap((e) => e.match(METRIC) ?? []));
    expect([...used].filter((n) => !names.has(n))).toEqual([]);
  });

  it('the ring metrics carry the hook values at each scrape', async () => {
    const m = new ProxyMetrics();
    let lost = 3;
    m.setDatapathStats(() => ({ monitorEvents: 120, monitorLost: lost, monitorStreams: 1 }));
    const read = async () => await m.registry.metrics();
    expect(await read()).toMatch(/^kubetun_monitor_lost_events_total 3$/m);
    expect(await read()).toMatch(/^kubetun_monitor_events_total 120$/m);
    expect(await read()).toMatch(/^kubetun_monitor_streams 1$/m);
    lost = 9;
    expect(await read()).toMatch(/^kubetun_monitor_lost_events_total 9$/m);
  });
});
