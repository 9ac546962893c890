import { describe, expect, it } from 'vitest';
import {
  IPPROTO_ICMP,
  IPPROTO_SCTP,
  IPPROTO_TCP,
  IPPROTO_UDP,
  PROTO_BY_K8S_NAME,
  protoName,
} from '../../src/wire/proto.ts';

describe('wire/proto: IANA protocol numbers, one table', () => {
  it('numbers as the IPv4 Protocol field carries them', () => {
    expect([IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_SCTP]).toEqual([1, 6, 17, 132]);
  });
  it("Kubernetes' port protocol names map to numbers and back", () => {
    for (const name of ['TCP', 'UDP', 'SCTP']) expect(protoName(PROTO_BY_K8S_NAME[name])).toBe(name);
    expect(PROTO_BY_K8S_NAME.tcp).toBeUndefined(); // core/v1 Protocol is capitals only
  });
  it('an unlisted number prints as itself', () => {
    expect(protoName(IPPROTO_ICMP)).toBe('ICMP');
    expect(protoName(47)).toBe('47');
  });
});
