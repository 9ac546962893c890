// The conntrack flags of `kubetun run` (--ct-max, --ct-drop-invalid, --ct-timeout, --ct-gc-*):
// strings from the command line validated into the datapath's part of the config and the
// housekeeping GC's part. Slow world; errors name the flag like OptionError does.
import { ctMaxDefault, type DatapathConfig } from '../datapath/state/config.ts';
import type { CtTimeouts } from '../datapath/state/ct-state.ts';
import { type CtGcConfig, DEFAULT_CT_GC } from '../housekeeping/ct-gc.ts';

/** Conntrack flags of `kubetun run`, as given (strings from the command line). */
export interface CtRunFlags {
  ctMax?: string;
  ctDropInvalid?: boolean;
  /** "tcp-established=86400,udp=30,..." */
  ctTimeout?: string;
  ctGcInterval?: string;
  ctGcMinInterval?: string;
  ctGcMaxInterval?: string;
}

/** Parsed: the datapath's part and the agent GC's part. */
export interface CtRunOptions {
  datapath: Partial<DatapathConfig>;
  gc: Partial<CtGcConfig>;
}

const TIMEOUT_FLAG_NAMES: Record<string, keyof CtTimeouts> = {
  'tcp-syn-sent': 'ctTcpSynSent',
  'tcp-syn-recv': 'ctTcpSynRecv',
  'tcp-established': 'ctTcpEstablished',
  'tcp-fin-wait': 'ctTcpFinWait',
  'tcp-close-wait': 'ctTcpCloseWait',
  'tcp-last-ack': 'ctTcpLastAck',
  'tcp-time-wait': 'ctTcpTimeWait',
  'tcp-close': 'ctTcpClose',
  udp: 'ctUdp',
  'udp-stream': 'ctUdpStream',
};

function posInt(flag: string, v: string, max = 0x7fffffff): number {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isInteger(n) || n < 1 || n > max) {
    throw new Error(`--${flag}: a positive integer up to ${max}, got ${JSON.stringify(v)}`);
  }
  return n;
}

/** Validate the conntrack flags; `cores` gives kube-proxy's default table size. */
export function parseCtRunFlags(f: CtRunFlags, cores: number): CtRunOptions {
  const datapath: Partial<DatapathConfig> = {
    ctCapacity: f.ctMax === undefined ? ctMaxDefault(cores) : posInt('ct-max', f.ctMax, 1 << 25),
    ctDropInvalid: f.ctDropInvalid === true,
  };
  for (const part of (f.ctTimeout ?? '').split(',')) {
    if (part.trim() === '') continue;
    const [name, value] = part.split('=');
    const key = TIMEOUT_FLAG_NAMES[name?.trim() ?? ''];
    if (!key || value === undefined) {
      const names = Object.keys(TIMEOUT_FLAG_NAMES).join(', ');
      throw new Error(
        `--ct-timeout: expected name=seconds with name one of ${names}, got ${JSON.stringify(part)}`,
      );
    }
    datapath[key] = posInt('ct-timeout', value);
  }
  const gc: Partial<CtGcConfig> = {};
  if (f.ctGcInterval !== undefined) gc.intervalSec = posInt('ct-gc-interval', f.ctGcInterval);
  if (f.ctGcMinInterval !== undefined)
    gc.minIntervalSec = posInt('ct-gc-min-interval', f.ctGcMinInterval);
  if (f.ctGcMaxInterval !== undefined)
    gc.maxIntervalSec = posInt('ct-gc-max-interval', f.ctGcMaxInterval);
  const g = { ...DEFAULT_CT_GC, ...gc };
  if (g.minIntervalSec > g.maxIntervalSec) {
    throw new Error('--ct-gc-min-interval: larger than --ct-gc-max-interval');
  }
  return { datapath, gc };
}
