// The packet loop: one TUN batch in, one dpProcess per packet, one writeBatch out.
//
// Packets that go back into the kernel (V_PASS, V_TX) are written from where they were read: the
// batch's offsets/lengths are compacted into preallocated arrays and written in ONE native call.
// A V_REPLY's generated packet lives in dp.out until the next dpProcess, so the pending batch is
// flushed first (order kept) and the reply written on its own — rejects are rare.
// Nothing here allocates per packet or per batch.
import type { Datapath } from '../datapath/state/datapath.ts';
import { dpProcess } from '../datapath/program.ts';
import { TX_REVNAT } from '../datapath/state/reasons.ts';
import { V_PASS, V_REPLY, V_TX } from '../datapath/state/verdict.ts';
import { ipv4RewriteSrc, l4RewriteSrcPort } from '../wire/rewrite.ts';
import type { TunDevice } from '../tun/tun.ts';
import type { Cidr } from '../wire/addr.ts';

/** Agent-level outcomes, beside the datapath's reasons (index into AgentCounters.values). */
export const AGENT_PACKETS = 0;
/**
 * Passed by the datapath but addressed into the service CIDR: the kernel routes the service CIDR
 * into the TUN, so writing it back would loop until its TTL runs out. Dropped (kube-proxy would
 * send it to the default route; there is nothing there to answer it either).
 */
export const AGENT_DROP_SERVICE_CIDR_LOOP = 1;
/** The kernel refused a written packet (counted per packet by the addon too). */
export const AGENT_TX_REFUSED = 2;
export const AGENT_BATCHES = 3;
export const AGENT_COUNTER_NAMES: readonly string[] = [
  'AGENT_PACKETS',
  'AGENT_DROP_SERVICE_CIDR_LOOP',
  'AGENT_TX_REFUSED',
  'AGENT_BATCHES',
];

export interface PacketLoop {
  readonly counters: Float64Array;
  handle(buf: Uint8Array, offs: Uint32Array, lens: Uint32Array, n: number): void;
}

export function createPacketLoop(
  dp: Datapath,
  tun: TunDevice,
  serviceCidr: Cidr,
  batchMax: number,
  nowMs: () => number,
): PacketLoop {
  const counters = new Float64Array(AGENT_COUNTER_NAMES.length);
  const txOffs = new Uint32Array(batchMax);
  const txLens = new Uint32Array(batchMax);
  const svcNet = serviceCidr.addr;
  const svcMask = serviceCidr.mask;
  // TEST HOOK (lab compare tests only): a deliberately broken kubetun that undoes reverse NAT,
  // so replies leave with the backend's address. Read once here, never per packet.
  const testSkipRevNat = process.env.KUBETUN_TEST_SKIP_REVNAT === '1';

  function flush(buf: Uint8Array, m: number): void {
    if (m === 0) return;
    const w = tun.writeBatch(buf, txOffs, txLens, m);
    if (w < m) counters[AGENT_TX_REFUSED] += m - w;
  }

  function handle(buf: Uint8Array, offs: Uint32Array, lens: Uint32Array, n: number): void {
    const now = nowMs();
    let m = 0;
    counters[AGENT_BATCHES] += 1;
    counters[AGENT_PACKETS] += n;
    for (let i = 0; i < n; i++) {
      const off = offs[i];
      const v = dpProcess(dp, buf, off, lens[i], now);
      if (testSkipRevNat && dp.lastReason === TX_REVNAT) undoRevNat(dp, buf);
      if (v === V_TX || v === V_PASS) {
        if (v === V_PASS && (dp.daddr & svcMask) >>> 0 === svcNet) {
          counters[AGENT_DROP_SERVICE_CIDR_LOOP] += 1;
          continue;
        }
        txOffs[m] = off;
        txLens[m] = lens[i];
        m++;
      } else if (v === V_REPLY) {
        flush(buf, m);
        m = 0;
        if (!tun.write(dp.out, 0, dp.outLen)) counters[AGENT_TX_REFUSED] += 1;
      }
      // V_DROP: nothing to write; dp.counters already holds the reason.
    }
    flush(buf, m);
  }

  return { counters, handle };
}

/** The test hook's work: put the backend (the conntrack entry's) back as the reply's source. */
function undoRevNat(dp: Datapath, buf: Uint8Array): void {
  ipv4RewriteSrc(buf, dp.ipOff, dp.ct.baddr(dp.lastCtIdx));
  l4RewriteSrcPort(buf, dp.ipOff, dp.ct.bport(dp.lastCtIdx));
}
