#!/usr/bin/env bash
# The external client VM: curl, ping and tcpdump, and routes to every node's pod CIDR via that
# node's address on the private network (host-gw, like the namespace lab's client). The routes
# are a systemd oneshot so they come back after a reboot.
#
#   bash lab/provision/client.sh NAME CIDR=NODE_IP ...    e.g. client 10.244.1.0/24=192.168.56.11
set -euo pipefail
[ $# -gt 1 ] || { echo "usage: client.sh NAME CIDR=NODE_IP ..." >&2; exit 2; }
cd "$(dirname "$0")/../.."
source lab/provision/hostname.sh
set_hostname "$1"
shift
export DEBIAN_FRONTEND=noninteractive
missing=()
for p in curl:curl iputils-ping:ping tcpdump:tcpdump iproute2:ip; do
  command -v "${p#*:}" >/dev/null || missing+=("${p%%:*}")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmds=()
for r in "$@"; do
  cidr=${r%%=*} via=${r#*=}
  [[ $cidr =~ ^[0-9.]+/[0-9]+$ && $via =~ ^[0-9.]+$ ]] || { echo "client.sh: bad route $r" >&2; exit 2; }
  cmds+=("ip route replace $cidr via $via")
done
script=$(IFS=';'; echo "${cmds[*]}")
cat >/etc/systemd/system/kubetun-client-routes.service <<UNIT
# Written by lab/provision/client.sh.
[Unit]
Description=kubetun lab: routes to the pod CIDRs via the nodes
After=network-online.target
Wants=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c '$script'

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable kubetun-client-routes.service
systemctl restart kubetun-client-routes.service
ip -4 route show
