// conntrack(8)'s view of a kubetun flow, derived from the flags the datapath keeps per entry
// (src/datapath/ct.ts): a state name, [UNREPLIED], [ASSURED].
//
// The datapath tracks less than nf_conntrack's TCP state machine, so some kernel states fold
// together: FIN or RST seen both ways is CLOSE (the kernel says TIME_WAIT after a FIN
// exchange, CLOSE after a RST); a FIN from the client only is FIN_WAIT, from the backend only
// CLOSE_WAIT.
import {
  CT_F_CLOSING,
  CT_F_RX_CLOSING,
  CT_F_SEEN_NON_SYN,
  CT_F_SEEN_REPLY,
  CT_F_TX_CLOSING,
} from '../datapath/ct.ts';

export const TCP_STATES = [
  'SYN_SENT',
  'SYN_RECV',
  'ESTABLISHED',
  'FIN_WAIT',
  'CLOSE_WAIT',
  'CLOSE',
] as const;
/** what `state` says for protocols without a state machine */
export const OTHER_STATES = ['UNREPLIED', 'REPLIED'] as const;

const IPPROTO_TCP = 6;

export function ctStateName(proto: number, flags: number): string {
  if (proto === IPPROTO_TCP) {
    if ((flags & CT_F_CLOSING) === CT_F_CLOSING) return 'CLOSE';
    if (flags & CT_F_TX_CLOSING) return 'FIN_WAIT';
    if (flags & CT_F_RX_CLOSING) return 'CLOSE_WAIT';
    if (flags & CT_F_SEEN_NON_SYN) return 'ESTABLISHED';
    return flags & CT_F_SEEN_REPLY ? 'SYN_RECV' : 'SYN_SENT';
  }
  return flags & CT_F_SEEN_REPLY ? 'REPLIED' : 'UNREPLIED';
}

/**
 * nf_conntrack's IPS_ASSURED: TCP once the handshake completed with a reply seen (and it stays
 * set while closing); UDP and the rest once traffic was seen both ways.
 */
export function ctAssured(proto: number, flags: number): boolean {
  if ((flags & CT_F_SEEN_REPLY) === 0) return false;
  return proto !== IPPROTO_TCP || (flags & CT_F_SEEN_NON_SYN) !== 0;
}
