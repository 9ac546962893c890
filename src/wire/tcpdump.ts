// tcpdump's way of writing header fields, for every slow-world printer (pcap summaries, lab
// compare, traces), so the same packet reads the same everywhere.
//
// TCP flags: tcpdump (print-tcp.c, tcp_flag_values) writes one letter per set flag in the order
// FIN SYN RST PSH ACK URG ECE CWR — "F", "S", "R", "P", ".", "U", "E", "W" — so SYN+ACK is "S.",
// FIN+PSH+ACK "FP."; no flag at all is "none". Endpoints are "addr.port"; ICMP messages are
// named as tcpdump names them ("echo request", "unreachable port", "time exceeded").
import {
  ICMP_DEST_UNREACH,
  ICMP_ECHO,
  ICMP_ECHO_REPLY,
  ICMP_FRAG_NEEDED,
  ICMP_HOST_UNREACH,
  ICMP_NET_UNREACH,
  ICMP_PARAMETER_PROBLEM,
  ICMP_PKT_FILTERED,
  ICMP_PORT_UNREACH,
  ICMP_PROT_UNREACH,
  ICMP_TIME_EXCEEDED,
} from './icmp.ts';

const TCP_FLAG_LETTERS = 'FSRP.UEW';

/** The TCP flags byte (bit 0 FIN .. bit 7 CWR) as tcpdump prints it between brackets. */
export function tcpdumpFlags(flags: number): string {
  let s = '';
  for (let i = 0; i < 8; i++) if (flags & (1 << i)) s += TCP_FLAG_LETTERS[i];
  return s === '' ? 'none' : s;
}

/** An address and, if it has one, a port, as tcpdump writes them: 10.0.0.1.80. */
export function tcpdumpEndpoint(addr: string, port?: number | string): string {
  return port === undefined ? addr : `${addr}.${port}`;
}

// ICMP destination-unreachable codes by the names tcpdump uses (print-icmp.c: "net", "host",
// "protocol", "port", "need to frag", "admin prohibited").
const UNREACH_CODES: Record<number, string> = {
  [ICMP_NET_UNREACH]: 'net',
  [ICMP_HOST_UNREACH]: 'host',
  [ICMP_PROT_UNREACH]: 'protocol',
  [ICMP_PORT_UNREACH]: 'port',
  [ICMP_FRAG_NEEDED]: 'need to frag',
  [ICMP_PKT_FILTERED]: 'admin prohibited',
};

/** What an ICMP message is, in words: "echo request", "unreachable port", "time exceeded". */
export function tcpdumpIcmp(type: number, code: number): string {
  if (type === ICMP_ECHO) return 'echo request';
  if (type === ICMP_ECHO_REPLY) return 'echo reply';
  if (type === ICMP_DEST_UNREACH) return `unreachable ${UNREACH_CODES[code] ?? `code ${code}`}`;
  if (type === ICMP_TIME_EXCEEDED) return 'time exceeded';
  if (type === ICMP_PARAMETER_PROBLEM) return 'parameter problem';
  return `type ${type} code ${code}`;
}
