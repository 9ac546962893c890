// conntrack(8)'s view of a kubetun flow: a state name, [UNREPLIED], [ASSURED]. The datapath
// keeps nf_conntrack's TCP state in the high nibble of the entry's flags byte (ct.ts) and the
// seen-bits in the low nibble; both LAST_ACK variants (last FIN from either side) show as
// LAST_ACK. Entries written without a state (state 0, e.g. by older tooling) are named from the
// seen-bits as before. SCTP flows show nf_conntrack_sctp's state names, as `conntrack -L` does.
import {
  CT_F_CLOSING,
  CT_F_RX_CLOSING,
  CT_F_SEEN_NON_SYN,
  CT_F_SEEN_REPLY,
  CT_F_TX_CLOSING,
  CT_F_SCTP_ASSURED,
  CT_STATE_SHIFT,
} from '../datapath/state/ct-state.ts';
import { IPPROTO_SCTP, IPPROTO_TCP } from '../wire/proto.ts';

export const TCP_STATES = [
  'SYN_SENT',
  'SYN_RECV',
  'ESTABLISHED',
  'FIN_WAIT',
  'CLOSE_WAIT',
  'LAST_ACK',
  'TIME_WAIT',
  'CLOSE',
] as const;
/** state nibble (CT_TCP_*) -> name; index 0 (no state) is resolved from the seen-bits */
const BY_STATE = [
  '',
  'SYN_SENT',
  'SYN_RECV',
  'ESTABLISHED',
  'FIN_WAIT',
  'CLOSE_WAIT',
  'LAST_ACK',
  'TIME_WAIT',
  'CLOSE',
  'LAST_ACK',
];
/** SCTP state nibble (CT_SCTP_*) -> name, the kernel's sctp_conntrack_names */
export const SCTP_STATES = [
  'NONE',
  'CLOSED',
  'COOKIE_WAIT',
  'COOKIE_ECHOED',
  'ESTABLISHED',
  'SHUTDOWN_SENT',
  'SHUTDOWN_RECD',
  'SHUTDOWN_ACK_SENT',
  'HEARTBEAT_SENT',
] as const;
/** what `state` says for protocols without a state machine */
export const OTHER_STATES = ['UNREPLIED', 'REPLIED'] as const;

export function ctStateName(proto: number, flags: number): string {
  if (proto === IPPROTO_TCP) {
    const named = BY_STATE[flags >>> CT_STATE_SHIFT];
    if (named) return named;
    if ((flags & CT_F_CLOSING) === CT_F_CLOSING) return 'CLOSE';
    if (flags & CT_F_TX_CLOSING) return 'FIN_WAIT';
    if (flags & CT_F_RX_CLOSING) return 'CLOSE_WAIT';
    if (flags & CT_F_SEEN_NON_SYN) return 'ESTABLISHED';
    return flags & CT_F_SEEN_REPLY ? 'SYN_RECV' : 'SYN_SENT';
  }
  if (proto === IPPROTO_SCTP) return SCTP_STATES[flags >>> CT_STATE_SHIFT] ?? 'NONE';
  return flags & CT_F_SEEN_REPLY ? 'REPLIED' : 'UNREPLIED';
}

/**
 * nf_conntrack's IPS_ASSURED: TCP once the handshake completed with a reply seen (and it stays
 * set while closing); SCTP once ESTABLISHED was reached; UDP and the rest once traffic was seen
 * both ways.
 */
export function ctAssured(proto: number, flags: number): boolean {
  if (proto === IPPROTO_SCTP) return (flags & CT_F_SCTP_ASSURED) !== 0;
  if ((flags & CT_F_SEEN_REPLY) === 0) return false;
  return proto !== IPPROTO_TCP || (flags & CT_F_SEEN_NON_SYN) !== 0;
}
