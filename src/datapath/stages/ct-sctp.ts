// SCTP conntrack: nf_conntrack's state machine for SCTP (net/netfilter/nf_conntrack_proto_sctp.c),
// states in the high nibble of the entry's flags byte like TCP's (state/ct-state.ts).
//
// Each chunk of a packet moves the state by the kernel's table, indexed by direction, chunk type
// and current state (rows below; "IV" = INVALID, the packet changes nothing). DATA, SACK and
// every other chunk type keep the state. The kernel's own words for the states: COOKIE_WAIT
// "an INIT chunk in the original direction, or also an INIT_ACK chunk in the reply direction";
// COOKIE_ECHOED a COOKIE_ECHO seen; ESTABLISHED "a COOKIE_ACK in the reply direction";
// SHUTDOWN_SENT / _RECD a SHUTDOWN in the original / reply direction; SHUTDOWN_ACK_SENT the
// SHUTDOWN_ACK opposite the SHUTDOWN; CLOSED after SHUTDOWN_COMPLETE (and, on this kernel's
// table, right after the first INIT: COOKIE_WAIT begins with the INIT ACK); HEARTBEAT_SENT a
// HEARTBEAT opening a flow (a multi-homed path's secondary conntrack).
//
// Also the kernel's, and applied here:
//   - do_basic_checks: INIT, INIT ACK and SHUTDOWN COMPLETE must be the packet's only chunk,
//     COOKIE ECHO and COOKIE ACK its first, else INVALID;
//   - a new flow (sctp_new): only from control chunks that lead out of NONE — so not from DATA,
//     SACK or unknown chunks, nor from ABORT, SHUTDOWN COMPLETE or COOKIE ACK (RFC 9260 8.4, out
//     of the blue);
//   - an INIT must carry verification tag 0 (RFC 9260 8.5.1 A);
//   - an INIT retransmitted on a CLOSED flow is let through but does not renew the lifetime
//     (so port reuse through a NAT cannot keep an entry alive forever).
// Not done: the kernel also keeps both verification tags per flow and calls a packet with the
// wrong tag INVALID (RFC 9260 8.5); the conntrack map has no column for them. Chunks after the
// first are applied in type order (the kernel: packet order); the two differ only for a packet
// bundling several state-changing control chunks after its first, which no state table row
// used by a correct endpoint distinguishes.

import {
  SCTP_ABORT,
  SCTP_CHUNKS_LATER_SHIFT,
  SCTP_COOKIE_ACK,
  SCTP_COOKIE_ECHO,
  SCTP_ERROR,
  SCTP_HEARTBEAT,
  SCTP_HEARTBEAT_ACK,
  SCTP_INIT,
  SCTP_INIT_ACK,
  SCTP_SHUTDOWN,
  SCTP_SHUTDOWN_ACK,
  SCTP_SHUTDOWN_COMPLETE,
  sctpChunkBit,
} from '../../wire/sctp.ts';
import {
  CT_DIR_REPLY,
  CT_F_BITS,
  CT_F_SCTP_ASSURED,
  CT_SCTP_CLOSED,
  CT_SCTP_ESTABLISHED,
  CT_SCTP_STATES,
  CT_STATE_SHIFT,
} from '../state/ct-state.ts';

/**
 * The chunk summary the parse stage stores for an INIT with a non-zero verification tag: no
 * first chunk, which every path below calls INVALID (a real summary always has one).
 */
export const CT_SCTP_EV_INVALID = 0;

/** ctSctpNext result bit: the packet is let through but must not renew the entry's lifetime */
export const CT_SCTP_KEEP_EXPIRY = 0x100;

const IV = 0xff; // INVALID
const KEEP = 0xfe; // the chunk does not change the state
const STATE: Record<string, number> = {
  NO: 0,
  CL: 1,
  CW: 2,
  CE: 3,
  ES: 4,
  SS: 5,
  SR: 6,
  SA: 7,
  HS: 8,
};

// The kernel's table (sctp_conntracks), per chunk type; columns NO CL CW CE ES SS SR SA HS.
const ORIG_ROWS: readonly [number, string][] = [
  [SCTP_INIT, 'CL CL CW CE ES CL CL SA CW'],
  [SCTP_INIT_ACK, 'CL CL CW CE ES SS SR SA CL'],
  [SCTP_ABORT, 'CL CL CL CL CL CL CL CL CL'],
  [SCTP_SHUTDOWN, 'CL CL CW CE SS SS SR SA CL'],
  [SCTP_SHUTDOWN_ACK, 'SA CL CW CE ES SA SA SA SA'],
  [SCTP_ERROR, 'CL CL CW CE ES SS SR SA CL'],
  [SCTP_COOKIE_ECHO, 'CL CL CE CE ES SS SR SA CL'],
  [SCTP_COOKIE_ACK, 'CL CL CW ES ES SS SR SA CL'],
  [SCTP_SHUTDOWN_COMPLETE, 'CL CL CW CE ES SS SR CL CL'],
  [SCTP_HEARTBEAT, 'HS CL CW CE ES SS SR SA HS'],
  [SCTP_HEARTBEAT_ACK, 'CL CL CW CE ES SS SR SA HS'],
];
const REPLY_ROWS: readonly [number, string][] = [
  [SCTP_INIT, 'IV CL CW CE ES SS SR SA IV'],
  [SCTP_INIT_ACK, 'IV CW CW CE ES SS SR SA IV'],
  [SCTP_ABORT, 'IV CL CL CL CL CL CL CL IV'],
  [SCTP_SHUTDOWN, 'IV CL CW CE SR SS SR SA IV'],
  [SCTP_SHUTDOWN_ACK, 'IV CL CW CE ES SA SA SA IV'],
  [SCTP_ERROR, 'IV CL CW CL ES SS SR SA IV'],
  [SCTP_COOKIE_ECHO, 'IV CL CE CE ES SS SR SA IV'],
  [SCTP_COOKIE_ACK, 'IV CL CW ES ES SS SR SA IV'],
  [SCTP_SHUTDOWN_COMPLETE, 'IV CL CW CE ES SS SR CL IV'],
  [SCTP_HEARTBEAT, 'IV CL CW CE ES SS SR SA HS'],
  [SCTP_HEARTBEAT_ACK, 'IV CL CW CE ES SS SR SA ES'],
];

const TYPES = 16; // chunk types 0..14 by value, 15 = any other (sctpChunkBit)

/** next state = TABLE[(dir * TYPES + type) * CT_SCTP_STATES + state], built once. */
const TABLE = (() => {
  const t = new Uint8Array(2 * TYPES * CT_SCTP_STATES).fill(KEEP);
  const fill = (dir: number, rows: readonly [number, string][]) => {
    for (const [type, row] of rows) {
      row.split(' ').forEach((name, s) => {
        t[(dir * TYPES + type) * CT_SCTP_STATES + s] = name === 'IV' ? IV : STATE[name];
      });
    }
  };
  fill(0, ORIG_ROWS);
  fill(CT_DIR_REPLY, REPLY_ROWS);
  return t;
})();

const ALONE =
  sctpChunkBit(SCTP_INIT) | sctpChunkBit(SCTP_INIT_ACK) | sctpChunkBit(SCTP_SHUTDOWN_COMPLETE);
const FIRST_ONLY = sctpChunkBit(SCTP_COOKIE_ECHO) | sctpChunkBit(SCTP_COOKIE_ACK);
const OOTB_NEVER =
  sctpChunkBit(SCTP_ABORT) | sctpChunkBit(SCTP_SHUTDOWN_COMPLETE) | sctpChunkBit(SCTP_COOKIE_ACK);
/** the chunk types that lead out of NONE (the ORIG rows above) */
const OPENERS = ORIG_ROWS.reduce((m, [type]) => m | sctpChunkBit(type), 0);

/** do_basic_checks on a chunk summary (sctpChunks): true if the chunks are in a legal order. */
function basicChecksOk(ev: number): boolean {
  const later = ev >>> SCTP_CHUNKS_LATER_SHIFT;
  if ((later & (ALONE | FIRST_ONLY)) !== 0) return false;
  return later === 0 || (ev & ALONE) === 0;
}

/** Whether a packet with chunk summary `ev` may open a new flow (sctp_new), else INVALID. */
export function ctSctpMayStart(ev: number): boolean {
  if ((ev & 0xffff) === CT_SCTP_EV_INVALID || !basicChecksOk(ev)) return false;
  const all = (ev | (ev >>> SCTP_CHUNKS_LATER_SHIFT)) & 0xffff;
  return (all & ~OPENERS) === 0 && (all & OOTB_NEVER) === 0;
}

function step(dir: number, s: number, bit: number): number {
  const type = 31 - Math.clz32(bit);
  const n = TABLE[(dir * TYPES + type) * CT_SCTP_STATES + s];
  return n === KEEP ? s : n;
}

/**
 * Flags byte after an SCTP packet with chunk summary `ev` (sctpChunks) in `dir`, possibly with
 * CT_SCTP_KEEP_EXPIRY; -1 when the packet is INVALID (the caller changes nothing then).
 */
export function ctSctpNext(flags: number, dir: number, ev: number): number {
  if ((ev & 0xffff) === CT_SCTP_EV_INVALID || !basicChecksOk(ev)) return -1;
  const s0 = flags >>> CT_STATE_SHIFT;
  let s = step(dir, s0, ev & 0xffff);
  if (s === IV) return -1;
  let later = ev >>> SCTP_CHUNKS_LATER_SHIFT;
  while (later !== 0) {
    const bit = later & -later;
    later ^= bit;
    s = step(dir, s, bit);
    if (s === IV) return -1;
  }
  let bits = flags & CT_F_BITS;
  if (s === CT_SCTP_ESTABLISHED) bits |= CT_F_SCTP_ASSURED;
  const n = (s << CT_STATE_SHIFT) | bits;
  const initAgain = (ev & sctpChunkBit(SCTP_INIT)) !== 0 && s0 === CT_SCTP_CLOSED;
  return initAgain && s === CT_SCTP_CLOSED ? n | CT_SCTP_KEEP_EXPIRY : n;
}
