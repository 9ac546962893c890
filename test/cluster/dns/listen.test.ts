// listenPair: UDP and TCP on one port. On port 0 the kernel's UDP pick may be taken on TCP;
// that made the DNS tests' upstream hang in CI (its beforeAll timed out on EADDRINUSE).
import { createSocket } from 'node:dgram';
import net from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { listenPair } from '../../../src/cluster/dns/listen.ts';

afterEach(() => {
  vi.restoreAllMocks();
});

const inUse = () => Object.assign(new Error('listen EADDRINUSE'), { code: 'EADDRINUSE' });

describe('listenPair', () => {
  it('port 0: a UDP port already taken on TCP is given up for a fresh pair', async () => {
    const listen = net.Server.prototype.listen;
    let fail = 2;
    const spy = vi.spyOn(net.Server.prototype, 'listen').mockImplementation(function (
      this: net.Server,
      ...args: unknown[]
    ) {
      if (fail-- > 0) {
        process.nextTick(() => this.emit('error', inUse()));
        return this;
      }
      return listen.apply(this, args as Parameters<typeof listen>);
    });
    const pair = await listenPair(
      '127.0.0.1',
      0,
      () => {},
      (s) => s.end(),
    );
    try {
      expect(spy).toHaveBeenCalledTimes(3);
      expect(pair.udp.address().port).toBe(pair.port);
      expect((pair.tcp.address() as net.AddressInfo).port).toBe(pair.port);
    } finally {
      pair.udp.close();
      await new Promise((r) => pair.tcp.close(r));
    }
  });

  it('a port given is tried once: taken on TCP, the error, and its UDP socket closed', async () => {
    const busy = net.createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', () => r()));
    const port = (busy.address() as net.AddressInfo).port;
    try {
      await expect(
        listenPair(
          '127.0.0.1',
          port,
          () => {},
          () => {},
        ),
      ).rejects.toMatchObject({
        code: 'EADDRINUSE',
      });
      // the UDP half was let go: the port binds again
      const udp = createSocket('udp4');
      await new Promise<void>((r) => udp.bind(port, '127.0.0.1', () => r()));
      udp.close();
    } finally {
      await new Promise((r) => busy.close(r));
    }
  });
});
