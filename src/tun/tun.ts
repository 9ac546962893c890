// TunDevice: the TS face of the native addon (src/tun/native/tun.cc, built by binding.gyp into
// build/Release/kubetun_tun.node).
//
// Reads: the addon drains the non-blocking fd into ONE Uint8Array handed over at open; each
// batch calls onBatch(buf, offs, lens, n) once — packet i is buf[offs[i] .. offs[i]+lens[i]).
// The arrays are reused by the next batch, so consume (or copy) packets inside the callback;
// rewriting them in place and handing the same arrays to writeBatch is the intended use.
// Writes: writeBatch writes n packets in one native call and returns how many the kernel took;
// refusals (EINVAL for a non-IP packet, say) are counted in stats, never thrown. The addon hands
// a batch to the kernel with one io_uring_enter when it can, else one write() per packet
// (`txPath` says which and why; `opts.uring: false` or KUBETUN_TUN_URING=0 asks for the plain
// loop); `stats.txSyscalls` counts the calls either took.
//
// Offloads (`opts.offload`, implies the vnet header): TUNSETOFFLOAD declares what this reader
// accepts — partial checksums, TCP and UDP GSO super-packets up to 64 KiB — and the kernel answers
// EINVAL for any bit it refuses, so the flags are asked for one step at a time (OFFLOAD_STEPS):
// a refused step is left out and named in `offload.refused` (the agent logs and counts it), the
// steps before it stay. Packets then carry a virtio_net_hdr (src/wire/virtio.ts) both ways.
//
// Address, MTU, queue and link state: `opts.mtu` / `opts.txQueueLen` / `opts.up` use
// SIOCSIFMTU / SIOCSIFTXQLEN / SIOCSIFFLAGS from the addon; addresses and routes are left to `ip`
// (the agent and the lab run it anyway).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { REPO_ROOT } from '../runtime.ts';

interface NativeQueue {
  start(): void;
  stop(): void;
  writeBatch(buf: Uint8Array, offs: Uint32Array, lens: Uint32Array, n: number): number;
  write(buf: Uint8Array, off: number, len: number): boolean;
  /** 0: batches go through io_uring; -1: not asked for or not built; else init's errno */
  txUring(): number;
  close(): void;
}

interface NativeAddon {
  open(name: string, flags: number): { fd: number; name: string };
  setOffload(fd: number, flags: number): number;
  setPersist(fd: number, on: boolean): void;
  setMtu(ifname: string, mtu: number): void;
  setTxQueueLen(ifname: string, n: number): void;
  setUp(ifname: string, up: boolean): void;
  /** pin.cc: the file's bytes [offset, offset + length) mapped MAP_SHARED (src/node/pin.ts) */
  mapFile(path: string, offset: number, length: number): ArrayBuffer;
  Queue: new (
    fd: number,
    rx: Uint8Array,
    offs: Uint32Array,
    lens: Uint32Array,
    stats: Float64Array,
    batchMax: number,
    onBatch: (n: number, errno: number) => void,
    uring: boolean,
  ) => NativeQueue;
  STAT_COUNT: number;
  /** built with liburing (binding.gyp) */
  uringBuilt: boolean;
}

const OPEN_MULTI_QUEUE = 1;
const OPEN_VNET_HDR = 2;
const OPEN_PERSIST = 4;

// TUNSETOFFLOAD bits (include/uapi/linux/if_tun.h).
export const TUN_F_CSUM = 0x01;
export const TUN_F_TSO4 = 0x02;
export const TUN_F_TSO6 = 0x04;
export const TUN_F_TSO_ECN = 0x08;
export const TUN_F_USO4 = 0x20;
export const TUN_F_USO6 = 0x40;

export interface OffloadStep {
  readonly name: string;
  readonly bits: number;
}

/**
 * What we ask for, in order; each step adds its bits to those the kernel took so far. Checksum
 * first: tun.c ignores every GSO bit without it. TSO_ECN rides with TSO4 (ECN-marked flows stay
 * offloaded; src/wire/virtio.ts accepts the ECN bit). USO only as the pair tun.c accepts (Linux
 * >= 6.2); a UDP_L4 packet is IPv4 here, the IPv6 half is never produced on an IPv4-only device.
 * TSO6 is not asked for: the datapath is IPv4 only.
 */
export const OFFLOAD_STEPS: readonly OffloadStep[] = [
  { name: 'csum', bits: TUN_F_CSUM },
  { name: 'tso4', bits: TUN_F_TSO4 | TUN_F_TSO_ECN },
  { name: 'uso4', bits: TUN_F_USO4 | TUN_F_USO6 },
];

export interface OffloadResult {
  /** TUNSETOFFLOAD bits in force */
  readonly flags: number;
  /** names of the steps in force */
  readonly enabled: readonly string[];
  /** steps the kernel refused, with its errno */
  readonly refused: readonly { name: string; errno: number }[];
}

/** Stats slots, in the order of `enum Stat` in tun.cc. */
const STAT_NAMES = [
  'rxPackets',
  'rxBytes',
  'rxBatches',
  'rxErrors',
  'txPackets',
  'txBytes',
  'txErrors',
  'txEinval',
  'txEagain',
  'txBadSlice',
  'txSyscalls',
] as const;
export type TunStats = Record<(typeof STAT_NAMES)[number], number>;

export interface TunOpenOptions {
  /** IFF_MULTI_QUEUE: open one more queue of the device (one fd per queue). */
  multiQueue?: boolean;
  /** IFF_VNET_HDR: every packet is prefixed by a virtio_net_hdr (the datapath must expect it). */
  vnetHdr?: boolean;
  /** TUNSETPERSIST: the device outlives this process (a restart re-attaches to it). */
  persist?: boolean;
  /** Set the MTU by ioctl right after opening. */
  mtu?: number;
  /**
   * The device's txqueuelen, by ioctl right after opening: how many packets the kernel holds
   * for this reader before it drops (tx_dropped). The kernel's default for a TUN is 500.
   */
  txQueueLen?: number;
  /** Bring the link up by ioctl right after opening. */
  up?: boolean;
  /** Packets per batch at most (default 64). */
  batch?: number;
  /** Bytes of the shared receive buffer (default: enough for `batch` MTU-sized packets). */
  bufferSize?: number;
  /**
   * Ask for offloads (TUNSETOFFLOAD, probed step by step; implies `vnetHdr`). `steps` replaces
   * OFFLOAD_STEPS (tests add a bit the kernel refuses to watch the fallback).
   */
  offload?: boolean | { steps: readonly OffloadStep[] };
  /**
   * Write batches through io_uring, one io_uring_enter per batch (default: yes unless
   * KUBETUN_TUN_URING=0). Falls back to one write() per packet when the addon was built without
   * liburing or the kernel refuses a ring (`txPath` says why).
   */
  uring?: boolean;
}

/** How writeBatch reaches the kernel: `why` names the reason for plain writes. */
export interface TxPath {
  readonly uring: boolean;
  readonly why: string;
}

/** Per batch: packet i is buf[offs[i] .. offs[i] + lens[i]), for i < n. */
export type TunBatchHandler = (
  buf: Uint8Array,
  offs: Uint32Array,
  lens: Uint32Array,
  n: number,
) => void;

const READ_ROOM = 65536 + 64; // tun.cc kReadRoom: the addon never offers a read less than this
/** With offloads, the default receive buffer holds this many maximal reads (~0.5 MiB). */
const OFFLOAD_READS = 8;

/** TUNSETOFFLOAD step by step: a refused step is skipped, named, and the rest still tried. */
function probeOffloads(native: NativeAddon, fd: number, steps: readonly OffloadStep[]) {
  let flags = 0;
  const enabled: string[] = [];
  const refused: { name: string; errno: number }[] = [];
  for (const step of steps) {
    // the first step is the checksum offload: without it no GSO bit means anything
    if (enabled.length === 0 && refused.length > 0) {
      refused.push({ name: step.name, errno: 0 });
      continue;
    }
    // tun.c checks every bit before it changes anything: a refusal leaves `flags` in force
    const errno = native.setOffload(fd, flags | step.bits);
    if (errno === 0) {
      flags |= step.bits;
      enabled.push(step.name);
    } else {
      refused.push({ name: step.name, errno });
    }
  }
  return { flags, enabled, refused };
}

/** TunDevice.kernelStats: the device's drops as the kernel counts them. */
export interface TunKernelStats {
  txDropped: number;
  rxDropped: number;
}

/** Reads the kernel's drop counters of device `name` (sysfs; -1 for a counter it cannot read). */
export function tunKernelStats(name: string, root = '/sys/class/net'): TunKernelStats {
  const read = (f: string): number => {
    try {
      const v = Number(readFileSync(`${root}/${name}/statistics/${f}`, 'utf8').trim());
      return Number.isFinite(v) ? v : -1;
    } catch {
      return -1;
    }
  };
  return { txDropped: read('tx_dropped'), rxDropped: read('rx_dropped') };
}

let addon: NativeAddon | undefined;

/** Loads build/Release/kubetun_tun.node; the error says how to build it. */
export function loadTunAddon(): NativeAddon {
  if (addon) return addon;
  const require = createRequire(import.meta.url);
  try {
    addon = require(join(REPO_ROOT, 'build/Release/kubetun_tun.node')) as NativeAddon;
  } catch (err) {
    throw new Error(
      `kubetun: the TUN addon is not built (${(err as Error).message}); run \`npm install\` ` +
        'or `node scripts/build-addon.mjs` (needs g++, make, python3 and Node headers)',
    );
  }
  return addon;
}

export class TunDevice {
  readonly name: string;
  readonly fd: number;
  private readonly native: NativeAddon;
  private readonly queue: NativeQueue;
  private readonly rx: Uint8Array;
  private readonly offs: Uint32Array;
  private readonly lens: Uint32Array;
  private readonly statsArr: Float64Array;
  private handler: TunBatchHandler | undefined;
  private errorHandler: ((err: Error) => void) | undefined;
  private closed = false;
  /** offloads in force (all empty without `offload`) */
  offload: OffloadResult = { flags: 0, enabled: [], refused: [] };
  /** every read and write carries a virtio_net_hdr */
  vnetHdr = false;

  private constructor(
    native: NativeAddon,
    fd: number,
    name: string,
    batch: number,
    size: number,
    uring: boolean,
  ) {
    this.native = native;
    this.fd = fd;
    this.name = name;
    this.rx = new Uint8Array(size);
    this.offs = new Uint32Array(batch);
    this.lens = new Uint32Array(batch);
    this.statsArr = new Float64Array(native.STAT_COUNT);
    this.queue = new native.Queue(
      fd,
      this.rx,
      this.offs,
      this.lens,
      this.statsArr,
      batch,
      (n, errno) => this.dispatch(n, errno),
      uring,
    );
  }

  /**
   * Creates the TUN device `name` (IFF_TUN | IFF_NO_PI), or attaches to it if it exists (a
   * persistent device, or another queue of a multi-queue one). A name like "kt%d" lets the
   * kernel pick; `name` then holds the real one.
   */
  static open(name: string, opts: TunOpenOptions = {}): TunDevice {
    const native = loadTunAddon();
    const batch = opts.batch ?? 64;
    if (!Number.isInteger(batch) || batch < 1 || batch > 65536) {
      throw new RangeError(`TunDevice.open: batch must be 1..65536, got ${batch}`);
    }
    // Room for `batch` full-MTU packets, and always at least one maximal read; with offloads
    // reads are up to 64 KiB super-packets: room for several before a batch is cut short.
    const floor = opts.offload ? OFFLOAD_READS * READ_ROOM : READ_ROOM;
    const size = Math.max(opts.bufferSize ?? 0, READ_ROOM + (batch - 1) * 2048, floor);
    let flags = 0;
    if (opts.multiQueue) flags |= OPEN_MULTI_QUEUE;
    if (opts.vnetHdr || opts.offload) flags |= OPEN_VNET_HDR;
    if (opts.persist) flags |= OPEN_PERSIST;
    const { fd, name: real } = native.open(name, flags);
    const uring = opts.uring ?? process.env.KUBETUN_TUN_URING !== '0';
    const dev = new TunDevice(native, fd, real, batch, size, uring);
    dev.vnetHdr = (flags & OPEN_VNET_HDR) !== 0;
    if (opts.offload) {
      const steps = opts.offload === true ? OFFLOAD_STEPS : opts.offload.steps;
      dev.offload = probeOffloads(native, fd, steps);
    }
    try {
      if (opts.mtu !== undefined) native.setMtu(real, opts.mtu);
      if (opts.txQueueLen !== undefined) native.setTxQueueLen(real, opts.txQueueLen);
      if (opts.up) native.setUp(real, true);
    } catch (err) {
      dev.close();
      throw err;
    }
    return dev;
  }

  /** io_uring or one write() per packet, and why (read once per open: the agent logs it). */
  get txPath(): TxPath {
    const rc = this.queue.txUring();
    if (rc === 0) return { uring: true, why: 'io_uring' };
    if (!this.native.uringBuilt) return { uring: false, why: 'addon built without liburing' };
    if (rc === -1) return { uring: false, why: 'not asked for (uring: false, KUBETUN_TUN_URING=0)' };
    return { uring: false, why: `io_uring refused (setup or submit): errno ${rc}` };
  }

  /** Starts reading: `cb` runs once per batch. Replaces a previous handler. */
  onBatch(cb: TunBatchHandler): void {
    this.handler = cb;
    if (!this.closed) this.queue.start();
  }

  /** A read error stops reading (e.g. the device was deleted); default: logged to stderr. */
  onError(cb: (err: Error) => void): void {
    this.errorHandler = cb;
  }

  /** Stops reading without closing (writes still work). */
  pause(): void {
    this.queue.stop();
  }

  writeBatch(buf: Uint8Array, offs: Uint32Array, lens: Uint32Array, n: number): number {
    return this.queue.writeBatch(buf, offs, lens, n);
  }

  write(buf: Uint8Array, off: number, len: number): boolean {
    return this.queue.write(buf, off, len);
  }

  setMtu(mtu: number): void {
    this.native.setMtu(this.name, mtu);
  }

  setUp(up: boolean): void {
    this.native.setUp(this.name, up);
  }

  /** Clears (or sets) TUNSETPERSIST, e.g. so that close() deletes a persistent device. */
  setPersist(on: boolean): void {
    this.native.setPersist(this.fd, on);
  }

  /** Stops polling and closes the fd; a non-persistent device disappears with its last fd. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.queue.close();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * The device's own counters as the kernel keeps them (/sys/class/net/DEV/statistics): the
   * packets it dropped before this reader saw them — `txDropped`, the kernel's transmit into
   * the TUN, i.e. toward the reader: its queue (txqueuelen) was full or no reader was attached
   * — and of those written back, `rxDropped`. Per device lifetime: a persistent TUN keeps
   * counting across agent restarts (what was dropped while no agent ran included). -1 when the
   * file cannot be read. `root` for tests.
   */
  kernelStats(root = '/sys/class/net'): TunKernelStats {
    return tunKernelStats(this.name, root);
  }

  /**
   * Per offload step: 1 in force, and a refusal counter (`<name>Refused`) — how often the kernel
   * said no to it (once per open; a restart shows again).
   */
  offloadCounters(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const s of OFFLOAD_STEPS) {
      out[s.name] = this.offload.enabled.includes(s.name) ? 1 : 0;
      out[`${s.name}Refused`] = 0;
    }
    for (const r of this.offload.refused)
      out[`${r.name}Refused`] = (out[`${r.name}Refused`] ?? 0) + 1;
    return out;
  }

  get stats(): TunStats {
    const s = {} as TunStats;
    STAT_NAMES.forEach((k, i) => {
      s[k] = this.statsArr[i];
    });
    return s;
  }

  private dispatch(n: number, errno: number): void {
    if (n > 0 && this.handler) this.handler(this.rx, this.offs, this.lens, n);
    if (errno !== 0) {
      const err = new Error(`${this.name}: read failed, errno ${errno}; reading stopped`);
      if (this.errorHandler) this.errorHandler(err);
      else process.stderr.write(`kubetun: ${err.message}\n`);
    }
  }
}
