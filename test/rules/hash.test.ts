import { describe, expect, it } from 'vitest';
import {
  base32Std,
  nftEndpointNameBase,
  nftServiceNameBase,
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

describe('nftables chain name bases (vectors from pkg/proxy/nftables/proxier_test.go)', () => {
  const ns = 'very-long-namespace-name-abcdefghijklmnopqrstuvwxyz0123456789xx';
  const svc = 'very-long-service-name-why-would-you-even-do-this-i-mean-really';
  const port = 'port-443-providing-the-hypertext-transmission-protocol-with-tls';

  it('service chains: hash of the readable name, then the name', () => {
    expect(nftServiceNameBase('testing', 'service', 'http', 'tcp')).toBe(
      'P4ZYZVCF-testing/service/tcp/http',
    );
    expect(nftServiceNameBase('testing', 'service', 'https', 'tcp')).toBe(
      'LZBRENCP-testing/service/tcp/https',
    );
    expect(nftServiceNameBase(ns, svc, port, 'sctp')).toBe(`KR6NACJP-${ns}/${svc}/sctp/${port}`);
    expect(nftServiceNameBase('ns1', 'svc1', 'p80', 'tcp')).toBe('ULMVA6XW-ns1/svc1/tcp/p80');
  });

  it('endpoint chains, IPv6 colons as dots, truncated to 240 characters', () => {
    expect(nftEndpointNameBase('testing', 'service', 'http', 'tcp', '10.180.0.1', 80)).toBe(
      'JO2XBXZR-testing/service/tcp/http__10.180.0.1/80',
    );
    expect(nftEndpointNameBase('testing', 'service', 'http', 'tcp', '10.180.0.2', 80)).toBe(
      '5S6H3H22-testing/service/tcp/http__10.180.0.2/80',
    );
    expect(
      nftEndpointNameBase(
        'testing',
        'service',
        'http',
        'tcp',
        'fd80:abcd:12::a1b2:c3d4:e5f6:9999',
        80,
      ),
    ).toBe('U7E2ET36-testing/service/tcp/http__fd80.abcd.12..a1b2.c3d4.e5f6.9999/80');
    expect(nftEndpointNameBase(ns, svc, port, 'sctp', '1234:5678:9abc:def0::abc:1234', 443)).toBe(
      `5YS7AFEA-${ns}/${svc}/sctp/${port}__1234.5678.9abc.def0..abc.1234/443`,
    );
    const t1 = nftEndpointNameBase(
      ns,
      svc,
      port,
      'sctp',
      '1234:5678:9abc:def0::abcd:1234:5678',
      443,
    );
    const t2 = nftEndpointNameBase(
      ns,
      svc,
      port,
      'sctp',
      '1234:5678:9abc:def0::abcd:1234:8765',
      443,
    );
    expect(t1).toBe(`CI6C53Q3-${ns}/${svc}/sctp/${port}__1234.5678.9abc.def0..abcd.1234...`);
    expect(t2).toBe(`2FLXFK6X-${ns}/${svc}/sctp/${port}__1234.5678.9abc.def0..abcd.1234...`);
    expect(t1).toHaveLength(240);
  });
});
