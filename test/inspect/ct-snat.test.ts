// `ct list` shows a masqueraded flow as `conntrack -L` shows the kernel's own (issue 20 point 5):
// the reply tuple goes to the masquerade address and SNAT port the backend sees, not to the
// client, in the text line, in --json (`snat`) and for the --reply-dst filter.
//
//   client 172.30.0.100:40000 ─SYN─▶ node1 172.30.0.11:30080 (NodePort, policy Cluster)
//        ─▶ DNAT 10.244.2.2:8080, SNAT 172.30.0.11:<61440..62463>
import { describe, expect, it } from 'vitest';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import { formatCtEntry } from '../../src/inspect/ct-format.ts';
import type { CtEntry } from '../../src/inspect/types.ts';
import { inspectAnswer } from '../../src/node/inspect.ts';
import { ipv4ToU32 } from '../../src/wire/addr.ts';
import {
  buildTcp,
  endpoint,
  get16,
  loaderOf,
  run,
  SYN,
  service,
  servicePort,
} from '../datapath/harness.ts';

const NODE = '172.30.0.11';
const CLIENT = '172.30.0.100';
const BACKEND = '10.244.2.2';

function setup() {
  const dp = createDatapath({
    nodeIp: ipv4ToU32(NODE),
    podGateway: ipv4ToU32('10.244.1.1'),
    podCidr: '10.244.1.0/24',
    clusterCidr: '10.244.0.0/16',
  });
  const svc = service('web', '10.96.0.10', { type: 'NodePort' });
  const rsp = servicePort(
    svc,
    80,
    'TCP',
    [endpoint(`${BACKEND}:8080`, { nodeName: 'node2' })],
    'http',
  );
  rsp.port.nodePort = 30080;
  loaderOf(dp).load([rsp], { nodeName: 'node1' });
  const ask = (req: Record<string, unknown>) =>
    inspectAnswer(dp, req, 1000, [rsp]) as { entries: CtEntry[] };
  return { dp, ask };
}

describe('ct list: the reply tuple of a masqueraded flow', () => {
  it('goes to the node address and SNAT port, as conntrack -L prints it', () => {
    const { dp, ask } = setup();
    const syn = { src: CLIENT, dst: NODE, sport: 40000, dport: 30080, flags: SYN };
    const r = run(dp, buildTcp(syn), 1_000_000);
    expect(r.reason).toBe('TX_DNAT_NEW');
    const snatPort = get16(r.pkt, 20); // the source port the backend sees
    expect(snatPort).toBeGreaterThanOrEqual(61440);

    const [e] = ask({ cmd: 'ct' }).entries;
    expect(e.orig).toMatchObject({ src: CLIENT, dst: NODE, sport: 40000, dport: 30080 });
    expect(e.reply).toMatchObject({ src: BACKEND, dst: NODE, sport: 8080, dport: snatPort });
    expect(e.snat).toEqual({ addr: NODE, port: snatPort });
    expect(formatCtEntry(e)).toContain(`src=${BACKEND} dst=${NODE} sport=8080 dport=${snatPort}`);
    expect(ask({ cmd: 'ct', filter: { replyDst: NODE } }).entries).toHaveLength(1);
    expect(ask({ cmd: 'ct', filter: { replyDst: CLIENT } }).entries).toHaveLength(0);
  });

  it('a flow that is not masqueraded still replies to its client, without snat', () => {
    const { dp, ask } = setup();
    const pod = '10.244.1.2';
    run(
      dp,
      buildTcp({ src: pod, dst: '10.96.0.10', sport: 40001, dport: 80, flags: SYN }),
      1_000_000,
    );
    const [e] = ask({ cmd: 'ct' }).entries;
    expect(e.reply).toMatchObject({ src: BACKEND, dst: pod, dport: 40001 });
    expect(e.snat).toBeUndefined();
    expect(ask({ cmd: 'ct', filter: { replyDst: pod } }).entries).toHaveLength(1);
  });
});
