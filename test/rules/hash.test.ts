import { describe, expect, it } from 'vitest';
import {
  base32Std,
  extChainName,
  fwChainName,
  portProtoHash,
  sepChainName,
  svcChainName,
  svlChainName,
} from '../../src/rules/hash.ts';

const enc = (s: string) => base32Std(new TextEncoder().encode(s));

describe('base32Std (RFC 4648 section 10 test vectors)', () => {
  it('encodes the RFC vectors with padding', () => {
    expect(enc('')).toBe('');
    expect(enc('f')).toBe('MY======');
    expect(enc('fo')).toBe('MZXQ====');
    expect(enc('foo')).toBe('MZXW6===');
    expect(enc('foob')).toBe('MZXW6YQ=');
    expect(enc('fooba')).toBe('MZXW6YTB');
    expect(enc('foobar')).toBe('MZXW6YTBOI======');
  });

  it('encodes high bytes without sign trouble', () => {
    expect(base32Std(new Uint8Array([0xff, 0xff, 0xff, 0xff, 0xff]))).toBe('77777777');
    expect(base32Std(new Uint8Array([0x00]))).toBe('AA======');
  });
});

describe('kube-proxy chain names (vectors from pkg/proxy/iptables/proxier_test.go)', () => {
  it('hashes service port names', () => {
    expect(portProtoHash('ns1/svc1:p80', 'tcp')).toBe('XPGD46QRK7WJZT7O');
    expect(svcChainName('ns1/svc1:p80', 'TCP')).toBe('KUBE-SVC-XPGD46QRK7WJZT7O');
    expect(svcChainName('ns2/svc2:p80', 'tcp')).toBe('KUBE-SVC-GNZBNJ2PO5MGZ6GT');
    expect(svcChainName('ns3/svc3:p80', 'tcp')).toBe('KUBE-SVC-X27LE4BHSL4DOUIK');
    expect(svcChainName('ns4/svc4:p80', 'tcp')).toBe('KUBE-SVC-4SW47YFZTEDKD3PK');
    expect(svcChainName('ns2/svc2:p8080', 'tcp')).toBe('KUBE-SVC-2VJB64SDSIJUP5T6');
    expect(fwChainName('ns5/svc5:p80', 'tcp')).toBe('KUBE-FW-NUKIZ6OKUXPJNT4C');
    expect(extChainName('ns2/svc2:p80', 'tcp')).toBe('KUBE-EXT-GNZBNJ2PO5MGZ6GT');
    expect(svlChainName('ns2/svc2:p80', 'tcp')).toBe('KUBE-SVL-GNZBNJ2PO5MGZ6GT');
  });

  it('hashes endpoint chains with the endpoint appended', () => {
    expect(sepChainName('ns1/svc1:p80', 'tcp', '10.180.0.1:80')).toBe('KUBE-SEP-SXIVWICOYRO3J4NJ');
    expect(sepChainName('ns2/svc2:p80', 'tcp', '10.180.0.2:80')).toBe('KUBE-SEP-RS4RBKLTHTF2IUXJ');
    expect(sepChainName('ns4/svc4:p80', 'tcp', '10.180.0.4:80')).toBe('KUBE-SEP-UKSFD7AGPMPPLUHC');
    expect(sepChainName('ns4/svc4:p80', 'tcp', '10.180.0.5:80')).toBe('KUBE-SEP-C6EBXVWJJZMIWKLZ');
    expect(sepChainName('ns5/svc5:p80', 'tcp', '10.180.0.3:80')).toBe('KUBE-SEP-I77PXRDZVX7PMWMN');
    expect(sepChainName('ns1/svc1:p80', 'tcp', '10.0.0.0:80')).toBe('KUBE-SEP-DKGQUZGBKLTPAR56');
    expect(sepChainName('ns3/svc3:p8081', 'tcp', '203.0.113.4:8081')).toBe(
      'KUBE-SEP-RUVVH7YV3PHQBDOS',
    );
  });

  it('distinguishes protocols and named ports', () => {
    expect(portProtoHash('ns1/svc1:p80', 'udp')).not.toBe(portProtoHash('ns1/svc1:p80', 'tcp'));
    expect(portProtoHash('ns1/svc1', 'tcp')).not.toBe(portProtoHash('ns1/svc1:', 'tcp'));
  });
});
