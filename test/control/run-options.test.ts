// `kubetun run` flags that drive the control plane: --scheduler, --metrics-bind-address,
// --healthz-bind-address, --kubeconfig instead of --manifests, sync periods.
import { describe, expect, it } from 'vitest';
import { SCHED_MAGLEV, SCHED_RANDOM } from '../../src/sched/kinds.ts';
import { runConfig } from '../fixtures/run-flags.ts';

describe('kubetun run control-plane flags', () => {
  it('defaults: random scheduler, metrics 127.0.0.1:10249, healthz 0.0.0.0:10256', () => {
    const o = runConfig();
    expect(o.net.scheduler).toBe(SCHED_RANDOM);
    expect(o.metricsBindAddress).toEqual({ host: '127.0.0.1', port: 10249 });
    expect(o.healthzBindAddress).toEqual({ host: '0.0.0.0', port: 10256 });
  });

  it('takes a scheduler name (mh = maglev), moves or switches off the servers', () => {
    const o = runConfig({
      scheduler: 'mh',
      metricsBindAddress: '0.0.0.0:9100',
      healthzBindAddress: '',
      syncPeriod: '5000',
    });
    expect(o.net.scheduler).toBe(SCHED_MAGLEV);
    expect(o.metricsBindAddress).toEqual({ host: '0.0.0.0', port: 9100 });
    expect(o.healthzBindAddress).toBeNull();
    expect(o.syncPeriod).toBe(5000);
    expect(runConfig({ metricsBindAddress: '0' }).metricsBindAddress).toBeNull();
  });

  it('--kubeconfig replaces --manifests; one of them is required', () => {
    expect(() => runConfig({ manifests: undefined, kubeconfig: '/k' })).not.toThrow();
    expect(() => runConfig({ manifests: undefined })).toThrow(/^--manifests: required/);
    // in a Pod, neither is needed: the in-cluster API config
    expect(runConfig({ manifests: undefined }, 1, true).inCluster).toBe(true);
  });

  it.each([
    [{ scheduler: 'fastest' }, /^--scheduler: unknown scheduler "fastest"/],
    [{ metricsBindAddress: 'localhost:10249' }, /^--metrics-bind-address: expected ip:port/],
    [{ healthzBindAddress: '0.0.0.0:70000' }, /^--healthz-bind-address: expected ip:port/],
    [{ healthzBindAddress: '300.0.0.1:10256' }, /^--healthz-bind-address: /],
    [{ syncPeriod: 'soon' }, /^--sync-period: /],
  ])('names the flag of a bad value %j', (over, re) => {
    expect(() => runConfig(over)).toThrow(re);
  });
});
