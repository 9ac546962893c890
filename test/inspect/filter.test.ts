// Conntrack filters and state names on a bare conntrack map, and the CLI's flag validation.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CT_F_RX_CLOSING,
  CT_F_SEEN_NON_SYN,
  CT_F_SEEN_REPLY,
  CT_F_TX_CLOSING,
} from '../../src/datapath/state/ct-state.ts';
import { ctFilterMatch, parseCtFilter } from '../../src/inspect/ct-filter.ts';
import { ctAssured, ctStateName } from '../../src/inspect/ct-state.ts';
import { ctFilterFromFlags } from '../../src/inspect/flags.ts';
import { resolveSocket } from '../../src/inspect/socket.ts';
import { ConntrackMap } from '../../src/maps/conntrack.ts';
import { ip } from '../datapath/harness.ts';

describe('ctFilterMatch', () => {
  const ct = new ConntrackMap(64);
  // client 10.244.1.3:43512 -> 10.96.0.10:80 served by 10.244.2.2:8080, established
  const tcp = ct.create(
    6,
    ip('10.244.1.3'),
    ip('10.96.0.10'),
    43512,
    80,
    ip('10.244.2.2'),
    8080,
    1,
    1,
    99,
  );
  ct.setFlags(tcp, CT_F_SEEN_NON_SYN | CT_F_SEEN_REPLY);
  // client 10.244.3.9:5353 -> 10.96.0.53:53 served by 10.244.1.7:53, no reply
  const udp = ct.create(
    17,
    ip('10.244.3.9'),
    ip('10.96.0.53'),
    5353,
    53,
    ip('10.244.1.7'),
    53,
    2,
    2,
    99,
  );
  const which = (spec: Record<string, unknown>) =>
    [tcp, udp].filter((i) => ctFilterMatch(parseCtFilter(spec, 'f'), ct, i));

  it('an empty filter passes every flow', () => {
    expect(which({})).toEqual([tcp, udp]);
  });

  it('src/dst match the original tuple (client, VIP), with or without a prefix', () => {
    expect(which({ src: '10.244.1.3' })).toEqual([tcp]);
    expect(which({ src: '10.244.0.0/16' })).toEqual([tcp, udp]);
    expect(which({ dst: '10.96.0.53' })).toEqual([udp]);
    // the backend is the reply source, not an original address
    expect(which({ src: '10.244.2.2' })).toEqual([]);
    expect(which({ dst: '10.244.2.2' })).toEqual([]);
  });

  it('replySrc/replyDst match the reply tuple (backend -> client)', () => {
    expect(which({ replySrc: '10.244.2.2' })).toEqual([tcp]);
    expect(which({ replyDst: '10.244.3.9' })).toEqual([udp]);
    expect(which({ replyDst: '10.96.0.53' })).toEqual([]);
  });

  it('proto, state and ports', () => {
    expect(which({ proto: 'udp' })).toEqual([udp]);
    expect(which({ proto: 6 })).toEqual([tcp]);
    expect(which({ proto: '17' })).toEqual([udp]);
    expect(which({ state: 'established' })).toEqual([tcp]);
    expect(which({ state: 'UNREPLIED' })).toEqual([udp]);
    expect(which({ sport: 43512, dport: 80 })).toEqual([tcp]);
    expect(which({ sport: 43512, dport: 53 })).toEqual([]);
  });

  it('conditions combine with AND', () => {
    expect(which({ proto: 'tcp', dst: '10.96.0.53' })).toEqual([]);
  });
});

describe('state names and [ASSURED] from datapath flags', () => {
  const S = CT_F_SEEN_NON_SYN;
  const R = CT_F_SEEN_REPLY;
  it.each([
    [0, 'SYN_SENT', false],
    [R, 'SYN_RECV', false],
    [S | R, 'ESTABLISHED', true],
    [S, 'ESTABLISHED', false], // mid-stream pickup, nothing back yet
    [S | R | CT_F_TX_CLOSING, 'FIN_WAIT', true],
    [S | R | CT_F_RX_CLOSING, 'CLOSE_WAIT', true],
    [S | R | CT_F_TX_CLOSING | CT_F_RX_CLOSING, 'CLOSE', true],
  ])('TCP flags %i: %s, assured %s', (flags, state, assured) => {
    expect(ctStateName(6, flags)).toBe(state);
    expect(ctAssured(6, flags)).toBe(assured);
  });

  it('UDP: UNREPLIED until a reply, then REPLIED and assured', () => {
    expect([ctStateName(17, 0), ctAssured(17, 0)]).toEqual(['UNREPLIED', false]);
    expect([ctStateName(17, R), ctAssured(17, R)]).toEqual(['REPLIED', true]);
  });
});

describe('SCTP flows (issue 19)', () => {
  it("show nf_conntrack_sctp's state names, assured once ESTABLISHED", () => {
    const R = CT_F_SEEN_REPLY;
    const st = (s: number, bits = 0) => (s << 4) | bits;
    expect([ctStateName(132, st(1)), ctAssured(132, st(1))]).toEqual(['CLOSED', false]);
    expect(ctStateName(132, st(2, R))).toBe('COOKIE_WAIT');
    expect([ctStateName(132, st(4, R | 1)), ctAssured(132, st(4, R | 1))]).toEqual([
      'ESTABLISHED',
      true,
    ]);
    expect(ctStateName(132, st(7, R | 1))).toBe('SHUTDOWN_ACK_SENT');
    expect(ctStateName(132, st(8))).toBe('HEARTBEAT_SENT');
  });

  it('are filtered by --proto sctp and --state COOKIE_ECHOED', () => {
    expect(ctFilterFromFlags({ proto: 'sctp', state: 'COOKIE_ECHOED' })).toEqual({
      proto: 'sctp',
      state: 'COOKIE_ECHOED',
    });
  });
});

describe('ctFilterFromFlags', () => {
  it('keeps only the flags given', () => {
    expect(ctFilterFromFlags({ src: '10.0.0.1', proto: 'tcp', json: true })).toEqual({
      src: '10.0.0.1',
      proto: 'tcp',
    });
  });

  it('names the flag in errors', () => {
    expect(() => ctFilterFromFlags({ replySrc: '10.0.0' })).toThrow(/^--reply-src: invalid IPv4/);
    expect(() => ctFilterFromFlags({ proto: 'gre' })).toThrow(/^--proto: "gre" is not tcp/);
    expect(() => ctFilterFromFlags({ dport: '70000' })).toThrow(/^--dport: "70000" is not a port/);
    expect(() => ctFilterFromFlags({ state: 'OPEN' })).toThrow(/^--state: "OPEN" is not one of/);
  });
});

describe('resolveSocket', () => {
  let dir = '';
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
  const mk = (...names: string[]) => {
    dir = mkdtempSync(join(tmpdir(), 'kti-sock-'));
    for (const n of names) writeFileSync(join(dir, n), '');
    return dir;
  };

  it('--socket as given, --node as <dir>/<node>.sock', () => {
    const d = mk();
    expect(resolveSocket({ socket: '/x/y.sock' }, d)).toBe('/x/y.sock');
    expect(resolveSocket({ node: 'node2' }, d)).toBe(join(d, 'node2.sock'));
    expect(() => resolveSocket({ node: '../etc' }, d)).toThrow(/--node: "\.\.\/etc"/);
    expect(() => resolveSocket({ node: 'a', socket: 'b' }, d)).toThrow(/not both/);
  });

  it('the only socket in the directory by default', () => {
    const d = mk('node1.sock', 'node1.state.json');
    expect(resolveSocket({}, d)).toBe(join(d, 'node1.sock'));
  });

  it('an error listing the sockets when there is not exactly one', () => {
    const d = mk('node2.sock', 'node1.sock');
    expect(() => resolveSocket({}, d)).toThrow(
      /2 control sockets in .*: node1\.sock, node2\.sock; choose one with --node/,
    );
    expect(() => resolveSocket({}, join(d, 'missing'))).toThrow(/no control socket in/);
  });
});
