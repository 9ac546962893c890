// The ClusterIP datapath: one import for the agent, the TUN loop, the pcap replayer and inspect.

export { DEFAULT_DATAPATH_CONFIG, type DatapathConfig, resolveDatapathConfig } from './config.ts';
export * from './ct.ts';
export { dpCtFlushStaleUdp, dpCtGc } from './ct-gc.ts';
export { createDatapath, DP_OUT_CAPACITY, Datapath, dpResetCounters } from './datapath.ts';
export { type DpLoadOptions, type DpLoadStats, dpLoadServices, eligibleEndpoints } from './load.ts';
export { dpProcess } from './program.ts';
export { DP_V8_INLINE_BUDGET, dpTuneV8 } from './tune.ts';
export * from './reasons.ts';
export * from './verdict.ts';
