import { describe, expect, test } from 'vitest';
import { Allocator } from '../../src/cluster/allocator.ts';

describe('Allocator', () => {
  test('never the network or broadcast address; /30 has two usable addresses', () => {
    const a = new Allocator({ serviceCidr: '10.96.0.0/30' });
    expect(a.reserve('clusterIP', '10.96.0.0', 'x')).toBe('out-of-range');
    expect(a.reserve('clusterIP', '10.96.0.3', 'x')).toBe('out-of-range');
    expect(a.allocate('clusterIP', 'a')).toBe('10.96.0.1');
    expect(a.allocate('clusterIP', 'b')).toBe('10.96.0.2');
    expect(a.allocate('clusterIP', 'c')).toBeUndefined();
    expect(
      new Allocator({ serviceCidr: '10.96.0.0/32' }).allocate('clusterIP', 'a'),
    ).toBeUndefined();
  });

  test('dynamic allocation prefers the upper band, then falls back to the static one', () => {
    // /24: 256 addresses, static band min(max(16, 256/16), 256) = 16 → 10.96.0.1..10.96.0.16
    const a = new Allocator({ serviceCidr: '10.96.0.0/24' });
    expect(a.allocate('clusterIP', 's')).toBe('10.96.0.17');
    for (let i = 18; i <= 254; i++) a.reserve('clusterIP', `10.96.0.${i}`, 'fill');
    expect(a.allocate('clusterIP', 't')).toBe('10.96.0.1');
    // node ports: 2768 ports, band min(max(16, 2768/32), 128) = 86 → first dynamic 30086
    expect(a.allocate('nodePort', 's')).toBe(30086);
    // a small range (<= 16) has no static band
    expect(
      new Allocator({
        serviceCidr: '10.0.0.0/24',
        nodePortRange: { min: 30000, max: 30009 },
      }).allocate('nodePort', 'x'),
    ).toBe(30000);
  });

  test('reserve: ok for the holder again, taken for another, out-of-range outside', () => {
    const a = new Allocator({ serviceCidr: '10.96.0.0/12' });
    expect(a.reserve('nodePort', 30080, 'Service default/a')).toBe('ok');
    expect(a.reserve('nodePort', 30080, 'Service default/a')).toBe('ok');
    expect(a.reserve('nodePort', 30080, 'Service default/b')).toBe('taken');
    expect(a.reserve('nodePort', 29999, 'Service default/b')).toBe('out-of-range');
    expect(a.reserve('clusterIP', '10.244.2.2', 'Service default/b')).toBe('out-of-range');
    expect(a.explain('nodePort', 'taken')).toBe('provided port is already allocated');
    a.release('nodePort', 30080);
    expect(a.reserve('nodePort', 30080, 'Service default/b')).toBe('ok');
  });

  test('releaseOwner frees everything an owner held', () => {
    const a = new Allocator({ serviceCidr: '10.96.0.0/12' });
    a.allocate('clusterIP', 'o');
    a.allocate('nodePort', 'o');
    a.allocate('nodePort', 'p');
    a.releaseOwner('o');
    expect(a.toJSON()).toEqual({
      serviceCidr: '10.96.0.0/12',
      nodePortRange: { min: 30000, max: 32767 },
      clusterIPs: {},
      nodePorts: { '30087': 'p' },
    });
  });

  test('toJSON/fromJSON: the state survives a restart, and the next value follows it', () => {
    const a = new Allocator({
      serviceCidr: '10.96.0.0/12',
      reserved: { '10.96.0.1': 'Service default/kubernetes' },
    });
    a.allocate('clusterIP', 'x');
    a.reserve('nodePort', 30080, 'x');
    const b = Allocator.fromJSON(JSON.parse(JSON.stringify(a.toJSON())));
    expect(b.toJSON()).toEqual(a.toJSON());
    expect(b.owner('clusterIP', '10.96.0.1')).toBe('Service default/kubernetes');
    expect(b.allocate('clusterIP', 'y')).toBe('10.96.1.2');
    expect(b.reserve('nodePort', 30080, 'z')).toBe('taken');
  });
});
