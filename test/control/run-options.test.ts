// `kubetun run` flags that drive the control plane: --scheduler, --metrics-bind-address,
// --healthz-bind-address, --kubeconfig instead of --manifests, sync periods.
import { describe, expect, it } from 'vitest';
import { toOptions } from '../../src/cli/run.ts';
import { validateOptions } from '../../src/node/options.ts';
import { SCHED_MAGLEV, SCHED_RANDOM } from '../../src/sched/kinds.ts';
import { runFlags as flags } from '../fixtures/run-flags.ts';


describe('kubetun run control-plane flags', () => {
  it('defaults: random scheduler, metrics 127.0.0.1:10249, healthz 0.0.0.0:10256', () => {
    const net = validateOptions(toOptions(flags));
    expect(net.scheduler).toBe(SCHED_RANDOM);
    expect(net.metricsBind).toEqual({ host: '127.0.0.1', port: 10249 });
    expect(net.healthzBind).toEqual({ host: '0.0.0.0', port: 10256 });
  });

  it('takes a scheduler name (mh = maglev), moves or switches off the servers', () => {
    const o = toOptions({
      ...flags,
      scheduler: 'mh',
      metricsBindAddress: '0.0.0.0:9100',
      healthzBindAddress: '',
      syncPeriod: '5000',
    });
    const net = validateOptions(o);
    expect(net.scheduler).toBe(SCHED_MAGLEV);
    expect(net.metricsBind).toEqual({ host: '0.0.0.0', port: 9100 });
    expect(net.healthzBind).toBeNull();
    expect(o.syncPeriodMs).toBe(5000);
    expect(
      validateOptions(toOptions({ ...flags, metricsBindAddress: '0' })).metricsBind,
    ).toBeNull();
  });

  it('--kubeconfig replaces --manifests; one of them is required', () => {
    const o = toOptions({ ...flags, manifests: undefined as unknown as string, kubeconfig: '/k' });
    expect(() => validateOptions(o)).not.toThrow();
    expect(() => validateOptions({ ...o, kubeconfig: undefined })).toThrow(
      /^--manifests: required/,
    );
  });

  it.each([
    [{ scheduler: 'fastest' }, /^--scheduler: unknown scheduler "fastest"/],
    [{ metricsBindAddress: 'localhost:10249' }, /^--metrics-bind-address: expected ip:port/],
    [{ healthzBindAddress: '0.0.0.0:70000' }, /^--healthz-bind-address: expected ip:port/],
    [{ healthzBindAddress: '300.0.0.1:10256' }, /^--healthz-bind-address: /],
    [{ syncPeriod: 'soon' }, /^--sync-period: /],
  ])('names the flag of a bad value %j', (over, re) => {
    expect(() => validateOptions(toOptions({ ...flags, ...over }))).toThrow(re);
  });
});
