// The text views against lines written out by hand from conntrack -L and ipvsadm -Ln output.
import { describe, expect, it } from 'vitest';
import { ctSummary, formatCtEntry } from '../../src/inspect/ct-format.ts';
import { formatSvcReport } from '../../src/inspect/svc-format.ts';
import type { CtEntry, SvcReport } from '../../src/inspect/types.ts';

function entry(over: Partial<CtEntry>): CtEntry {
  return {
    proto: 'TCP',
    protoNum: 6,
    state: 'ESTABLISHED',
    expiresInSec: 86397,
    orig: { src: '10.244.1.3', dst: '10.96.0.10', sport: 43512, dport: 80, packets: 6, bytes: 420 },
    reply: {
      src: '10.244.2.2',
      dst: '10.244.1.3',
      sport: 8080,
      dport: 43512,
      packets: 4,
      bytes: 512,
    },
    backendId: 7,
    revNat: 3,
    packets: 10,
    bytes: 932,
    seenReply: true,
    assured: true,
    ...over,
  };
}

describe('formatCtEntry (conntrack -L)', () => {
  it('prints an established TCP flow with both tuples, their counters and [ASSURED]', () => {
    expect(formatCtEntry(entry({}))).toBe(
      'tcp      6 86397 ESTABLISHED src=10.244.1.3 dst=10.96.0.10 sport=43512 dport=80 ' +
        'packets=6 bytes=420 src=10.244.2.2 dst=10.244.1.3 sport=8080 dport=43512 packets=4 ' +
        'bytes=512 [ASSURED] mark=0 use=1',
    );
  });

  it('puts [UNREPLIED] between the tuples of a flow without a reply, and no [ASSURED]', () => {
    const e = entry({
      state: 'SYN_SENT',
      expiresInSec: 59,
      reply: { ...entry({}).reply, packets: 0, bytes: 0 },
      seenReply: false,
      assured: false,
    });
    expect(formatCtEntry(e)).toBe(
      'tcp      6 59 SYN_SENT src=10.244.1.3 dst=10.96.0.10 sport=43512 dport=80 packets=6 ' +
        'bytes=420 [UNREPLIED] src=10.244.2.2 dst=10.244.1.3 sport=8080 dport=43512 ' +
        'packets=0 bytes=0 mark=0 use=1',
    );
  });

  it('prints SCTP like the kernel: state column and ports (issue 19; was "unknown 132")', () => {
    // conntrack -L on Linux 6.18 for an INIT DNATed by kube-proxy's rule (no acct counters):
    // "sctp     132 9 CLOSED src=10.99.0.2 dst=10.96.0.50 sport=40000 dport=9000 [UNREPLIED] ..."
    const e = entry({
      proto: 'SCTP',
      protoNum: 132,
      state: 'CLOSED',
      expiresInSec: 9,
      orig: {
        src: '10.99.0.2',
        dst: '10.96.0.50',
        sport: 40000,
        dport: 9000,
        packets: 1,
        bytes: 60,
      },
      reply: {
        src: '10.99.1.2',
        dst: '10.99.0.2',
        sport: 9900,
        dport: 40000,
        packets: 0,
        bytes: 0,
      },
      seenReply: false,
      assured: false,
    });
    expect(formatCtEntry(e)).toBe(
      'sctp     132 9 CLOSED src=10.99.0.2 dst=10.96.0.50 sport=40000 dport=9000 packets=1 ' +
        'bytes=60 [UNREPLIED] src=10.99.1.2 dst=10.99.0.2 sport=9900 dport=40000 packets=0 ' +
        'bytes=0 mark=0 use=1',
    );
  });

  it('prints no state column for UDP', () => {
    const e = entry({ proto: 'UDP', protoNum: 17, state: 'REPLIED', expiresInSec: 117 });
    expect(formatCtEntry(e)).toBe(
      'udp      17 117 src=10.244.1.3 dst=10.96.0.10 sport=43512 dport=80 packets=6 bytes=420 ' +
        'src=10.244.2.2 dst=10.244.1.3 sport=8080 dport=43512 packets=4 bytes=512 [ASSURED] ' +
        'mark=0 use=1',
    );
  });

  it('prints a flow of a protocol without ports as addresses and counters (no ICMP format)', () => {
    const t = { sport: 0, dport: 0, packets: 1, bytes: 84 };
    const e = entry({
      proto: 'ICMP',
      protoNum: 1,
      state: 'UNREPLIED',
      expiresInSec: 59,
      orig: { src: '10.244.1.3', dst: '10.96.0.10', ...t },
      reply: { src: '10.244.2.2', dst: '10.244.1.3', ...t, packets: 0, bytes: 0 },
      seenReply: false,
      assured: false,
    });
    expect(formatCtEntry(e)).toBe(
      'unknown  1 59 src=10.244.1.3 dst=10.96.0.10 packets=1 bytes=84 ' +
        '[UNREPLIED] src=10.244.2.2 dst=10.244.1.3 packets=0 bytes=0 mark=0 use=1',
    );
  });

  it('ends with a conntrack-style count line', () => {
    expect(ctSummary(3, 'shown')).toMatch(/: 3 flow entries have been shown\.$/);
    expect(ctSummary(0, 'deleted')).toMatch(/: 0 flow entries have been deleted\.$/);
  });
});

describe('formatSvcReport (ipvsadm -Ln)', () => {
  const backend = { weight: 1, state: 'active', local: true, active: 0, inactive: 0 };
  const report: SvcReport = {
    connTableSize: 4096,
    services: [
      {
        vip: '10.96.0.10',
        port: 80,
        proto: 'TCP',
        protoNum: 6,
        scheduler: 'random',
        flags: [],
        affinityTimeoutSec: 0,
        revNat: 1,
        name: 'default/web:http',
        backends: [
          { id: 1, addr: '10.244.1.2', port: 8080, ...backend, active: 2, inactive: 13 },
          { id: 2, addr: '10.244.2.3', port: 8080, ...backend, weight: 0, state: 'terminating' },
        ],
      },
      {
        vip: '10.96.0.20',
        port: 53,
        proto: 'UDP',
        protoNum: 17,
        scheduler: 'rr',
        flags: ['affinity'],
        affinityTimeoutSec: 10800,
        revNat: 2,
        backends: [],
      },
    ],
  };

  it('prints the header, each service, and its backends with ipvsadm column widths', () => {
    expect(formatSvcReport(report)).toEqual([
      'IP Virtual Server version 1.2.1 (size=4096)',
      'Prot LocalAddress:Port Scheduler Flags  Service',
      '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn',
      'TCP  10.96.0.10:80 random               default/web:http',
      '  -> 10.244.1.2:8080              Masq    1      2          13        ',
      '  -> 10.244.2.3:8080              Masq    0      0          0         ',
      // no endpoints: no destination lines; ClientIP affinity shows as IPVS persistence
      'UDP  10.96.0.20:53 rr persistent 10800',
    ]);
  });

  it('names the Service of each frontend, the local-scope entry of an ETP Local one too', () => {
    const np = {
      ...report.services[0]!,
      vip: '172.30.0.11',
      port: 30081,
      flags: ['nodeport', 'etp-local', 'local-scope'],
      name: 'default/web-local',
    };
    const lines = formatSvcReport({ ...report, services: [np] });
    expect(lines[3]).toBe(
      'TCP  172.30.0.11:30081 random           default/web-local (local endpoints)',
    );
    expect(lines[1]!.indexOf('Service')).toBe(lines[3]!.indexOf('default/'));
  });
});
