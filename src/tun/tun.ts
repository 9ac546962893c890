// TunDevice: the TS face of the native addon (src/tun/native/tun.cc, built by binding.gyp into
// build/Release/kubetun_tun.node).
//
// Reads: the addon drains the non-blocking fd into ONE Uint8Array handed over at open; each
// batch calls onBatch(buf, offs, lens, n) once — packet i is buf[offs[i] .. offs[i]+lens[i]).
// The arrays are reused by the next batch, so consume (or copy) packets inside the callback;
// rewriting them in place and handing the same arrays to writeBatch is the intended use.
// Writes: writeBatch writes n packets in one native call and returns how many the kernel took;
// refusals (EINVAL for a non-IP packet, say) are counted in stats, never thrown.
//
// Address, MTU and link state: `opts.mtu` / `opts.up` use SIOCSIFMTU / SIOCSIFFLAGS from the
// addon; addresses and routes are left to `ip` (the agent and the lab run it anyway).
import { createRequire } from 'node:module';

interface NativeQueue {
  start(): void;
  stop(): void;
  writeBatch(buf: Uint8Array, offs: Uint32Array, lens: Uint32Array, n: number): number;
  write(buf: Uint8Array, off: number, len: number): boolean;
  close(): void;
}

interface NativeAddon {
  open(name: string, flags: number): { fd: number; name: string };
  setPersist(fd: number, on: boolean): void;
  setMtu(ifname: string, mtu: number): void;
  setUp(ifname: string, up: boolean): void;
  Queue: new (
    fd: number,
    rx: Uint8Array,
    offs: Uint32Array,
    lens: Uint32Array,
    stats: Float64Array,
    batchMax: number,
    onBatch: (n: number, errno: number) => void,
  ) => NativeQueue;
  STAT_COUNT: number;
}

const OPEN_MULTI_QUEUE = 1;
const OPEN_VNET_HDR = 2;
const OPEN_PERSIST = 4;

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
  /** Bring the link up by ioctl right after opening. */
  up?: boolean;
  /** Packets per batch at most (default 64). */
  batch?: number;
  /** Bytes of the shared receive buffer (default: enough for `batch` MTU-sized packets). */
  bufferSize?: number;
}

/** Per batch: packet i is buf[offs[i] .. offs[i] + lens[i]), for i < n. */
export type TunBatchHandler = (
  buf: Uint8Array,
  offs: Uint32Array,
  lens: Uint32Array,
  n: number,
) => void;

const READ_ROOM = 65536 + 64; // tun.cc kReadRoom: the addon never offers a read less than this

let addon: NativeAddon | undefined;

/** Loads build/Release/kubetun_tun.node; the error says how to build it. */
export function loadTunAddon(): NativeAddon {
  if (addon) return addon;
  const require = createRequire(import.meta.url);
  try {
    addon = require('../../build/Release/kubetun_tun.node') as NativeAddon;
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

  private constructor(native: NativeAddon, fd: number, name: string, batch: number, size: number) {
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
    // Room for `batch` full-MTU packets, and always at least one maximal read.
    const size = Math.max(opts.bufferSize ?? 0, READ_ROOM + (batch - 1) * 2048, READ_ROOM);
    let flags = 0;
    if (opts.multiQueue) flags |= OPEN_MULTI_QUEUE;
    if (opts.vnetHdr) flags |= OPEN_VNET_HDR;
    if (opts.persist) flags |= OPEN_PERSIST;
    const { fd, name: real } = native.open(name, flags);
    const dev = new TunDevice(native, fd, real, batch, size);
    try {
      if (opts.mtu !== undefined) native.setMtu(real, opts.mtu);
      if (opts.up) native.setUp(real, true);
    } catch (err) {
      dev.close();
      throw err;
    }
    return dev;
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
