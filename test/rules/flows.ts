// The flow-test scaffolding shared by the iptables and nftables packet-flow tests (kube-proxy's
// runPacketFlowTests): a table of packets with where each must land, checked through whichever
// tracer the file runs.

import { expect } from 'vitest';

export interface Flow {
  name: string;
  sourceIP: string;
  destIP: string;
  destPort: number;
  protocol?: string;
  output: string;
  masq?: boolean;
}

/** A flow's packet as the tracers take it (protocol defaulted to tcp). */
export interface FlowPacket {
  sourceIP: string;
  protocol: string;
  destIP: string;
  destPort: number;
}

/** Trace every flow's packet with `trace`; expect its output and masquerade mark, by name. */
export function expectFlows(
  flows: Flow[],
  trace: (p: FlowPacket) => { output: string; masq: boolean },
): void {
  for (const f of flows) {
    const p = {
      sourceIP: f.sourceIP,
      protocol: f.protocol ?? 'tcp',
      destIP: f.destIP,
      destPort: f.destPort,
    };
    const r = trace(p);
    expect({ flow: f.name, output: r.output, masq: r.masq }).toEqual({
      flow: f.name,
      output: f.output,
      masq: f.masq ?? false,
    });
  }
}
