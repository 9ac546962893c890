// tcpdump's way of writing header fields, for every slow-world printer (pcap summaries, lab
// compare, traces), so the same packet reads the same everywhere.
//
// TCP flags: tcpdump (print-tcp.c, tcp_flag_values) writes one letter per set flag in the order
// FIN SYN RST PSH ACK URG ECE CWR — "F", "S", "R", "P", ".", "U", "E", "W" — so SYN+ACK is "S.",
// FIN+PSH+ACK "FP."; no flag at all is "none".

const TCP_FLAG_LETTERS = 'FSRP.UEW';

/** The TCP flags byte (bit 0 FIN .. bit 7 CWR) as tcpdump prints it between brackets. */
export function tcpdumpFlags(flags: number): string {
  let s = '';
  for (let i = 0; i < 8; i++) if (flags & (1 << i)) s += TCP_FLAG_LETTERS[i];
  return s === '' ? 'none' : s;
}
