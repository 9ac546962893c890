// Pinned maps: the datapath's maps in one file on a tmpfs, mapped MAP_SHARED by the addon
// (src/tun/native/pin.cc) — the analogue of Cilium's maps pinned in bpffs. The pages outlive
// the agent, so a restarted agent attaches to the same services, backends, reverse NAT,
// conntrack, affinity and SNAT entries the dead one left — IPv4 and IPv6 — and translates
// established flows before it has reloaded anything. (Fragment maps are not pinned: a restart
// loses at most the later fragments of datagrams in flight.)
//
// File layout (little-endian u32 words; every region starts on a page):
//
//   page 0   header: magic 'KTPN', PIN_VERSION, map count, complete flag, then per map
//            (in PINNED_MAPS order) name index, capacity, offset, bytes
//   region   one map's backing buffer, exactly as the map lays itself out (src/maps/)
//
// Attach checks the header (magic, PIN_VERSION, map count, complete), then each map checks its
// region as it attaches: byte size, magic and capacity (src/maps/hashtab.ts carve/initHeader).
// Any difference is an upgrade across a layout change (or a changed --ct-max and the like) and
// is refused with one line — never read as something it is not. A new file is sparse: pages cost
// memory only once a map writes them.
import {
  closeSync,
  existsSync,
  ftruncateSync,
  openSync,
  readSync,
  renameSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import {
  createDatapath,
  type Datapath,
  type MapBuffers,
  PINNED_MAPS,
  type PinnedMapName,
} from '../datapath/state/datapath.ts';
import type { DatapathConfig } from '../datapath/state/config.ts';
import { UserError } from '../errors.ts';
import { loadTunAddon } from '../tun/tun.ts';

/** Bump when the header or the set of pinned maps changes. Map columns carry their own MAGIC.
 * v2: the IPv6 maps (svc6 … snat6) are pinned too. */
export const PIN_VERSION = 2;
const MAGIC = 0x4b54504e; // 'KTPN'
const PAGE = 4096;
const H_MAGIC = 0;
const H_VERSION = 1;
const H_COUNT = 2;
const H_COMPLETE = 3;
const H_MAPS = 8;
const MAP_WORDS = 4;

interface Region {
  name: PinnedMapName;
  capacity: number;
  offset: number;
  bytes: number;
}

/** The pinned-map file beside the control socket (the agent's private directory). */
export function pinPathFor(ctlSocket: string): string {
  return `${ctlSocket.replace(/\.sock$/, '')}.maps`;
}

function mapsOf(
  dp: Datapath,
): Record<PinnedMapName, { capacity: number; buffer: ArrayBufferLike }> {
  return {
    svc: dp.svc,
    be: dp.be,
    revnat: dp.revnat,
    ct: dp.ct,
    aff: dp.aff,
    snat: dp.nat.snat,
    svc6: dp.svc6,
    be6: dp.be6,
    revnat6: dp.revnat6,
    ct6: dp.ct6,
    aff6: dp.aff6,
    snat6: dp.nat.snat6,
  };
}

/** What this build lays out for `cfg`, measured on a throwaway heap datapath (zero pages). */
function measureRegions(cfg: Partial<DatapathConfig>): Region[] {
  const maps = mapsOf(createDatapath(cfg));
  let offset = PAGE;
  return PINNED_MAPS.map((name) => {
    const { capacity, buffer } = maps[name];
    const r = { name, capacity, offset, bytes: buffer.byteLength };
    offset += Math.ceil(r.bytes / PAGE) * PAGE;
    return r;
  });
}

function readHeader(path: string): Uint32Array {
  const fd = openSync(path, 'r');
  try {
    const b = new Uint8Array(PAGE);
    const n = readSync(fd, b, 0, PAGE, 0);
    return new Uint32Array(b.buffer, 0, Math.floor(n / 4));
  } finally {
    closeSync(fd);
  }
}

/** The regions the file's header records; throws a one-line reason for a file it cannot be. */
function readRegions(path: string): Region[] {
  let h: Uint32Array;
  try {
    h = readHeader(path);
  } catch (err) {
    throw new Error(`cannot read ${path}: ${(err as Error).message}`);
  }
  if (h.length < H_MAPS || h[H_MAGIC] !== MAGIC)
    throw new Error(`${path} is not a kubetun pinned-map file`);
  if (h[H_VERSION] !== PIN_VERSION)
    throw new Error(
      `${path} has pinned-map layout v${h[H_VERSION]}, this kubetun reads v${PIN_VERSION}`,
    );
  if (h[H_COMPLETE] !== 1)
    throw new Error(`${path} was never completed (its writer died creating it)`);
  if (h[H_COUNT] !== PINNED_MAPS.length)
    throw new Error(`${path} pins ${h[H_COUNT]} maps, this kubetun ${PINNED_MAPS.length}`);
  return PINNED_MAPS.map((name, i) => {
    const w = H_MAPS + i * MAP_WORDS;
    return { name, capacity: h[w + 1], offset: h[w + 2], bytes: h[w + 3] };
  });
}

/** Why the file at `path` cannot be attached with `cfg` (one line), or undefined if it can. */
export function pinProblem(path: string, cfg: Partial<DatapathConfig>): string | undefined {
  try {
    attachPinned(path, cfg);
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}

function mapRegions(path: string, regions: readonly Region[]): MapBuffers {
  const addon = loadTunAddon();
  const out: MapBuffers = {};
  for (const r of regions) out[r.name] = addon.mapFile(path, r.offset, r.bytes);
  return out;
}

export interface PinnedDatapath {
  dp: Datapath;
  /** true: attached to maps a previous agent left; false: a new file */
  attached: boolean;
  path: string;
}

/**
 * Attaches to the pinned maps at `path`. A file that does not fit this build and these flags
 * is refused (UserError, one line and what to do); nothing in it is read as maps.
 */
export function attachPinned(path: string, cfg: Partial<DatapathConfig>): PinnedDatapath {
  const refuse = (why: string) =>
    new UserError('PIN_LAYOUT', `pinned maps not attached: ${why}`, {
      hint: 'start with the flags and kubetun version that wrote them, or run `kubetun cleanup` (established flows are lost)',
    });
  let regions: Region[];
  try {
    regions = readRegions(path);
  } catch (err) {
    throw refuse((err as Error).message);
  }
  try {
    // each map checks its buffer's size, magic and capacity before it reads anything
    return { dp: createDatapath(cfg, mapRegions(path, regions)), attached: true, path };
  } catch (err) {
    throw refuse(`${path}: ${(err as Error).message} (another layout, or other flags)`);
  }
}

/** A new pinned-map file at `path` (an old one is replaced), and a datapath on it. */
export function createPinned(path: string, cfg: Partial<DatapathConfig>): PinnedDatapath {
  const regions = measureRegions(cfg);
  const last = regions[regions.length - 1];
  const size = last.offset + Math.ceil(last.bytes / PAGE) * PAGE;
  const tmp = `${path}.new`;
  const fd = openSync(tmp, 'w', 0o600);
  try {
    ftruncateSync(fd, size); // sparse: zero pages until written (an all-zero header = new map)
    const h = new Uint32Array(PAGE / 4);
    h[H_MAGIC] = MAGIC;
    h[H_VERSION] = PIN_VERSION;
    h[H_COUNT] = regions.length;
    for (const [i, r] of regions.entries()) {
      h.set([i, r.capacity, r.offset, r.bytes], H_MAPS + i * MAP_WORDS);
    }
    writeSync(fd, new Uint8Array(h.buffer, h.byteOffset, h.byteLength), 0, PAGE, 0);
  } finally {
    closeSync(fd);
  }
  const dp = createDatapath(cfg, mapRegions(tmp, regions));
  markComplete(tmp);
  renameSync(tmp, path);
  return { dp, attached: false, path };
}

function markComplete(path: string): void {
  const fd = openSync(path, 'r+');
  try {
    writeSync(fd, new Uint8Array(new Uint32Array([1]).buffer), 0, 4, H_COMPLETE * 4);
  } finally {
    closeSync(fd);
  }
}

export function removePinned(path: string): void {
  if (existsSync(path)) unlinkSync(path);
}
