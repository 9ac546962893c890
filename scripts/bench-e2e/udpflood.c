/*
 * A bounded UDP flood and its sink, for packets/s through the TUN.
 *
 *   udpflood send IP PORT COUNT [SIZE [PPS]]
 *                                        COUNT datagrams of SIZE bytes (default 64) from one
 *                                        socket (one flow, so one conntrack entry), as fast as
 *                                        sendto goes — or, with PPS > 0, paced: datagram i
 *                                        leaves no earlier than i / PPS seconds after the
 *                                        first (a busy wait: a sleep's wake-up is too coarse
 *                                        at 100 kpps). ENOBUFS/EAGAIN are retried, not counted.
 *                                        Prints {"sent":n,"sec":s}.
 *   udpflood sink PORT IDLE_MS           counts datagrams until none came for IDLE_MS (after
 *                                        the first). Prints {"received":n,"sec":s} where sec
 *                                        runs from the first to the last datagram.
 *
 * C, not Python or Node: the sender must outrun the data plane on a 2-core machine.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int flood(const char *ip, int port, long count, int size, double pps) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
  char buf[1500];
  if (fd < 0 || inet_pton(AF_INET, ip, &to.sin_addr) != 1 || size < 1 || size > 1472) {
    fprintf(stderr, "udpflood: bad socket, address or size\n");
    return 2;
  }
  memset(buf, 0x5a, sizeof buf);
  if (connect(fd, (struct sockaddr *)&to, sizeof to) < 0) {
    perror("connect");
    return 1;
  }
  double t0 = now();
  long sent = 0;
  while (sent < count) {
    if (pps > 0)
      while (now() - t0 < sent / pps) {
      }
    if (send(fd, buf, size, 0) == size) {
      sent++;
    } else if (errno == ENOBUFS || errno == EAGAIN || errno == ECONNREFUSED) {
      continue; /* ICMP unreachable from the sink's absence surfaces as ECONNREFUSED */
    } else {
      perror("send");
      break;
    }
  }
  printf("{\"sent\":%ld,\"sec\":%.6f}\n", sent, now() - t0);
  return 0;
}

static int sink(int port, int idle_ms) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  int rcvbuf = 8 << 20;
  struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = htons(port)};
  char buf[2048];
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
  if (bind(fd, (struct sockaddr *)&me, sizeof me) < 0) {
    perror("bind");
    return 1;
  }
  printf("ready\n");
  fflush(stdout);
  struct pollfd p = {.fd = fd, .events = POLLIN};
  long got = 0;
  double first = 0, last = 0;
  for (;;) {
    int r = poll(&p, 1, got == 0 ? -1 : idle_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) >= 0) {
      last = now();
      if (got++ == 0) first = last;
    }
  }
  printf("{\"received\":%ld,\"sec\":%.6f}\n", got, last - first);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 5 && strcmp(argv[1], "send") == 0)
    return flood(argv[2], atoi(argv[3]), atol(argv[4]), argc > 5 ? atoi(argv[5]) : 64,
                 argc > 6 ? atof(argv[6]) : 0);
  if (argc == 4 && strcmp(argv[1], "sink") == 0) return sink(atoi(argv[2]), atoi(argv[3]));
  fprintf(stderr, "usage: udpflood send IP PORT COUNT [SIZE [PPS]] | udpflood sink PORT IDLE_MS\n");
  return 2;
}
