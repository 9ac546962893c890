#!/usr/bin/env python3
"""New-connection latency: N sequential connections per target, each connect + one tiny HTTP
GET + the whole response + close with SO_LINGER 0 (an RST, so no TIME_WAIT piles up and every
connection is a fresh 4-tuple and a fresh conntrack entry). Runs inside the client pod's
namespace (Node cannot set SO_LINGER). Several targets are visited in turn, one connection each,
so drift on a busy machine (JIT warm-up, other load) hits them alike.
Prints one JSON line: a list with count, errors, p50/p90/p99/max in microseconds per target.

usage: connlat.py COUNT WARMUP IP:PORT|[IPV6]:PORT [...]
"""
import errno
import json
import socket
import struct
import sys
import time

LINGER0 = struct.pack('ii', 1, 0)


def one(addr, req):
    s = socket.socket(socket.AF_INET6 if ':' in addr[0] else socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER0)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(2.0)
    t0 = time.perf_counter_ns()
    try:
        s.connect(addr)
        s.sendall(req)
        buf = b''
        want = -1
        while want < 0 or len(buf) < want:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
            if want < 0:
                end = buf.find(b'\r\n\r\n')
                if end >= 0:
                    head = buf[:end].lower()
                    i = head.find(b'content-length:')
                    n = int(head[i + 15:].split(b'\r\n')[0]) if i >= 0 else 0
                    want = end + 4 + n
        ok = 'ok' if want >= 0 and len(buf) >= want else 'short-response'
    except socket.timeout:
        ok = 'timeout'
    except OSError as e:
        ok = errno.errorcode.get(e.errno, 'oserror') if e.errno else type(e).__name__
    s.close()
    return ok, (time.perf_counter_ns() - t0) / 1000.0


def pct(sorted_us, p):
    if not sorted_us:
        return None
    k = min(len(sorted_us) - 1, max(0, int(round(p / 100.0 * len(sorted_us) + 0.5)) - 1))
    return round(sorted_us[k], 1)


def summary(lat, kinds, wall):
    lat.sort()
    return {
        'count': len(lat), 'errors': sum(kinds.values()), 'errorKinds': kinds,
        'wallSec': round(wall, 3),
        'p50': pct(lat, 50), 'p90': pct(lat, 90), 'p99': pct(lat, 99),
        'max': round(lat[-1], 1) if lat else None,
    }


def main():
    count, warmup = int(sys.argv[1]), int(sys.argv[2])
    targets = []
    for t in sys.argv[3:]:
        host, port = t.rsplit(':', 1)
        ip = host.strip('[]')  # an IPv6 target is [addr]:port
        req = ('GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' % host).encode()
        targets.append(((ip, int(port)), req))
    for _ in range(warmup):
        for addr, req in targets:
            one(addr, req)
    lat = [[] for _ in targets]
    errors = [{} for _ in targets]
    wall = [0.0 for _ in targets]
    for _ in range(count):
        for i, (addr, req) in enumerate(targets):
            ok, us = one(addr, req)
            wall[i] += us / 1e6
            if ok == 'ok':
                lat[i].append(us)
            else:
                errors[i][ok] = errors[i].get(ok, 0) + 1
    print(json.dumps([summary(lat[i], errors[i], wall[i]) for i in range(len(targets))]))


if __name__ == '__main__':
    main()
