// The curl-vs-ping demo's "why" says what the evidence printed beside it shows: an ICMP error
// when the capture has one (nftables mode rejects; iptables mode's node reports no next hop),
// kubetun's drop counter when it counted, silence only when there was nothing.
import { describe, expect, it } from 'vitest';
import { type CurlVsPingReport, echoFate } from '../../src/lab/demo/curl-vs-ping.ts';

const base = { vip: '10.96.0.10', port: 80, clientCapture: [] } as unknown as CurlVsPingReport;
const echo =
  '12:00:00.000001 IP 10.244.2.3 > 10.96.0.10: ICMP echo request, id 7, seq 1, length 64';

describe('curl-vs-ping: why the ping failed', () => {
  it('nftables mode: names the ICMP unreachable the capture shows', () => {
    const err =
      '12:00:00.000100 IP 10.244.2.1 > 10.244.2.3: ICMP 10.96.0.10 protocol 1 unreachable, length 92';
    const text = echoFate({ ...base, mode: 'nftables', clientCapture: [echo, err] }).join(' ');
    expect(text).toContain('"ICMP 10.96.0.10 protocol 1 unreachable", from 10.244.2.1');
    expect(text).toContain('nftables rules reject');
    expect(text).not.toMatch(/neither|no answer|nothing answers/);
  });

  it('iptables mode: the host unreachable of a route with no next hop', () => {
    const err = 'IP 10.244.2.1 > 10.244.2.3: ICMP host 10.96.0.10 unreachable, length 92';
    const text = echoFate({ ...base, mode: 'iptables', clientCapture: [echo, err, err] }).join(' ');
    expect(text).toContain('the 2 ICMP error(s) above ("ICMP host 10.96.0.10 unreachable"');
    expect(text).toContain('routed the echo on');
  });

  it('kubetun: the drop counter; with no evidence at all, silence', () => {
    const k = {
      ...base,
      mode: 'kubetun',
      clientCapture: [echo],
      echoDrops: { before: 3, after: 5 },
    };
    expect(echoFate(k as CurlVsPingReport).join(' ')).toContain('DROP_ECHO_TO_VIP +2 above');
    expect(echoFate({ ...base, mode: 'iptables', clientCapture: [echo] }).join(' ')).toContain(
      'nothing answers it',
    );
  });
});
