// A UDP socket and a TCP server on one port: DNS is served on both (RFC 7766), the cluster DNS
// server and the tests' upstream alike.
//
// Port 0 asks the kernel for a free UDP port, and that number may already be taken on TCP (a
// listener or a connection of another process or test): listening there fails with EADDRINUSE,
// so the pair is tried again on a fresh port, up to PAIR_TRIES times. A given port is tried once.
import { createSocket, type RemoteInfo, type Socket as UdpSocket } from 'node:dgram';
import { createServer, isIP, type Server, type Socket } from 'node:net';

/** Fresh ports tried for a pair on port 0 before the last EADDRINUSE is thrown. */
const PAIR_TRIES = 20;

export interface ListenPair {
  udp: UdpSocket;
  tcp: Server;
  port: number;
}

export async function listenPair(
  host: string,
  port: number,
  onMessage: (udp: UdpSocket, msg: Buffer, from: RemoteInfo) => void,
  onConnection: (s: Socket) => void,
): Promise<ListenPair> {
  for (let tries = 1; ; tries++) {
    const udp = createSocket(isIP(host) === 6 ? 'udp6' : 'udp4');
    udp.on('message', (msg, from) => onMessage(udp, msg, from));
    await new Promise<void>((res, rej) => {
      udp.once('error', rej);
      udp.bind(port, host, () => {
        udp.off('error', rej);
        res();
      });
    });
    const bound = udp.address().port;
    const tcp = createServer(onConnection);
    try {
      await new Promise<void>((res, rej) => {
        tcp.once('error', rej);
        tcp.listen(bound, host, () => {
          tcp.off('error', rej);
          res();
        });
      });
      return { udp, tcp, port: bound };
    } catch (e) {
      udp.close();
      const inUse = (e as NodeJS.ErrnoException).code === 'EADDRINUSE';
      if (port !== 0 || !inUse || tries >= PAIR_TRIES) throw e;
    }
  }
}
