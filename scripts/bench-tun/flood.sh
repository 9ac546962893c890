#!/usr/bin/env bash
# Packets/s and CPU per packet of one `kubetun run` under an unpaced UDP flood through a VIP,
# A/B: root; a C compiler; run from anywhere in the tree (the agent is this tree's bin/kubetun.mjs).
#
#   scripts/bench-tun/flood.sh [-n ROUNDS] [-c COUNT] [-p PREFIX] VARIANT...
#
# A VARIANT is a label and what it changes, `label:ENV=v,ENV2=v -- --agent-flag v` (either part may
# be empty), e.g. `write:KUBETUN_TUN_URING=0` `uring:` `b256:-- --batch 256`. Variants run in turn,
# ROUNDS times (interleaved, so the shared machine's load hits each alike). Namespaces (PREFIX,
# default kf-; nothing else is touched): cli 10.244.1.10 ─vc─ node (kubetun, kt0; uplink eth0 to
# `up`) ─vb─ be 10.244.1.11; Service 10.96.0.98:9/UDP → be:5353. One line per run: offered and
# delivered pps, what the agent read and wrote, what the TUN dropped, the agent's CPU seconds
# per million packets written (/proc/<pid>/stat utime+stime over the flood), context switches
# (perf stat, when perf is there), load average. Everything is removed on exit, processes by PID.
set -euo pipefail
ROUNDS=3 COUNT=1000000 P=kf-
while getopts n:c:p: o; do
  case $o in n) ROUNDS=$OPTARG ;; c) COUNT=$OPTARG ;; p) P=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=$(mktemp -d /tmp/kf-XXXXXX)
NSS=(node cli be up)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  for n in "${NSS[@]}"; do ip netns del "$P$n" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT INT TERM
cc -O2 -o "$DIR/udpflood" "$ROOT/scripts/bench-e2e/udpflood.c"

nsx() { local n=$1; shift; ip netns exec "$P$n" "$@"; }
for n in "${NSS[@]}"; do ip netns add "$P$n"; done
nsx node ip link set lo up
nsx node sysctl -qw net.ipv4.ip_forward=1
nsx node ip link add eth0 type veth peer name eth0 netns "${P}up"
nsx up ip link set eth0 up
nsx node ip addr add 10.250.0.2/24 dev eth0
nsx node ip link set eth0 up
pod() { # ns veth ip: wired as the lab wires a pod
  nsx node ip link add "$2" type veth peer name eth0 netns "$P$1"
  nsx node ip addr add 10.244.1.1/32 dev "$2"
  nsx node sysctl -qw "net.ipv4.conf.$2.proxy_arp=1" "net.ipv4.neigh.$2.proxy_delay=0"
  nsx node ip link set "$2" up
  nsx node ip route add "$3/32" dev "$2"
  nsx "$1" ip link set lo up
  nsx "$1" ip addr add "$3/24" dev eth0
  nsx "$1" ip link set eth0 up
  nsx "$1" ip route add default via 10.244.1.1
}
pod cli vc 10.244.1.10
pod be vb 10.244.1.11
mkdir -p "$DIR/manifests"
cat >"$DIR/manifests/flood.yaml" <<'Y'
apiVersion: v1
kind: Service
metadata: {name: flood, namespace: default}
spec:
  clusterIP: 10.96.0.98
  selector: {app: sink}
  ports: [{name: u, port: 9, targetPort: 5353, protocol: UDP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: flood-1, namespace: default, labels: {kubernetes.io/service-name: flood}}
addressType: IPv4
ports: [{name: u, port: 5353, protocol: UDP}]
endpoints:
  - {addresses: [10.244.1.11], conditions: {ready: true}, nodeName: node1}
Y

stat_of() { nsx node cat "/sys/class/net/kt0/statistics/$1"; }
last_json() { tail -n 1 "$1"; }
field() { sed -E "s/.*\"$2\":([0-9.]+).*/\\1/" <<<"$1"; }

run() { # label env flags
  local label=$1 envs=$2 flags=$3 sock=$DIR/node1.sock
  rm -f "$sock"
  # shellcheck disable=SC2086
  env ${envs//,/ } ip netns exec "${P}node" node "$ROOT/bin/kubetun.mjs" run --manifests "$DIR/manifests" \
    --node-name node1 --node-ip 10.250.0.2 --pod-cidr 10.244.1.0/24 --ctl-socket "$sock" \
    --metrics-bind-address 0 --healthz-bind-address 0 --no-watchdog --restart-grace 0 \
    --log-level warn $flags >"$DIR/agent-$label.log" 2>&1 &
  local agent=$!
  PIDS+=("$agent")
  for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
  sleep 1.5
  nsx cli "$DIR/udpflood" send 10.96.0.98 9 100 64 1000 >/dev/null # conntrack entry, steering
  sleep 0.3
  nsx be "$DIR/udpflood" sink 5353 1500 >"$DIR/sink.json" &
  local sink=$!
  PIDS+=("$sink")
  sleep 0.3
  local t0 d0 r0 c0 t1 d1 r1 c1 ps=""
  t0=$(stat_of tx_packets) d0=$(stat_of tx_dropped) r0=$(stat_of rx_packets)
  c0=$(awk '{print $14 + $15}' "/proc/$agent/stat")
  if command -v perf >/dev/null; then
    perf stat -x, -e context-switches -p "$agent" -o "$DIR/perf.csv" 2>/dev/null &
    ps=$!
    PIDS+=("$ps")
  fi
  nsx cli "$DIR/udpflood" send 10.96.0.98 9 "$COUNT" 64 >"$DIR/send.json"
  wait "$sink" || true
  [ -n "$ps" ] && kill -INT "$ps" && wait "$ps" || true
  t1=$(stat_of tx_packets) d1=$(stat_of tx_dropped) r1=$(stat_of rx_packets)
  c1=$(awk '{print $14 + $15}' "/proc/$agent/stat")
  kill "$agent"
  wait "$agent" 2>/dev/null || true
  local send recv cs=-
  send=$(last_json "$DIR/send.json") recv=$(last_json "$DIR/sink.json")
  [ -n "$ps" ] && cs=$(grep context-switches "$DIR/perf.csv" | cut -d, -f1)
  awk -v l="$label" -v s="$(field "$send" sent)" -v ss="$(field "$send" sec)" \
    -v r="$(field "$recv" received)" -v rs="$(field "$recv" sec)" -v rd=$((t1 - t0)) \
    -v wr=$((r1 - r0)) -v dr=$((d1 - d0)) -v cpu="$(((c1 - c0)))" -v hz="$(getconf CLK_TCK)" \
    -v cs="$cs" -v load="$(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN {
      w = wr > 0 ? wr : 1
      printf "%-10s offered %4.0f kpps  delivered %5.1f kpps  read %7d wrote %7d  tun drop %7d  cpu %5.2f s/Mpkt  csw %s  load %s\n",
        l, s / ss / 1e3, r / (rs > 0 ? rs : 1) / 1e3, rd, wr, dr, cpu / hz / w * 1e6, cs, load }'
}

for ((i = 1; i <= ROUNDS; i++)); do
  for v in "$@"; do
    label=${v%%:*} rest=${v#*:}
    envs=${rest%%--*} flags=""
    [[ $rest == *--* ]] && flags=${rest#*--}
    run "$label" "$(echo $envs)" "$flags"
  done
done
