#!/usr/bin/env bash
# Turns this machine (a Vagrant VM; any Debian 13 box) into lab node NODE of
# lab/vagrant-topology.yaml, as root: Debian's Node.js and the tools kubetun needs, the kernel
# modules of the data plane's hooks, `npm ci`, then the one provisioning path the namespace lab
# uses too — `kubetun lab provision-node` (src/lab/provision.ts) — with pod servers and kubetun
# as systemd units.
#
#   bash lab/provision/node.sh NODE [NODES]     NODES: how many of the topology's nodes exist
set -euo pipefail
node_name=${1:?usage: node.sh NODE [NODES]}
nodes=${2:-${KUBETUN_NODES:-2}}
cd "$(dirname "$0")/../.."
export DEBIAN_FRONTEND=noninteractive

# Node >= 20 from the distribution (Debian 13 ships 20.x), and the headers the TUN addon
# builds against, so node-gyp needs no download.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nodejs npm ca-certificates >/dev/null
fi
if [ ! -d /usr/include/node ]; then
  apt-get install -y -qq --no-install-recommends libnode-dev >/dev/null ||
    echo "node.sh: no libnode-dev; node-gyp will download Node's headers"
fi

# The hooks: TUN, tc clsact (sch_ingress), u32 classifier, mirred redirect; kept across reboots.
modules=(tun sch_ingress cls_u32 act_mirred)
printf '%s\n' "${modules[@]}" >/etc/modules-load.d/kubetun.conf
for m in "${modules[@]}"; do modprobe "$m"; done

bash scripts/bootstrap.sh # apt tools (iproute2, tcpdump, iptables, ...), npm ci, the addon

cat >/usr/local/bin/kubetun <<WRAP
#!/bin/sh
exec node $(pwd)/bin/kubetun.mjs "\$@"
WRAP
chmod 755 /usr/local/bin/kubetun

# The VM's own pods are vm-pod-a, ...; its kubetun answers on /run/kubetun-vm/<node>.sock. The
# default prefix (kt-) stays free for a namespace lab inside the VM (kubetun lab up / demo).
export KUBETUN_LAB_PREFIX=vm-
exec node bin/kubetun.mjs lab provision-node --node "$node_name" --nodes "$nodes" \
  --topology lab/vagrant-topology.yaml --systemd
