#!/usr/bin/env bash
# Turns this machine (a Vagrant VM: the kubetun/debian12 box, or any Debian 13 box) into lab node
# NODE of lab/vagrant-topology.yaml, as root: the kernel modules of the data plane's hooks, the
# TUN addon built here (on another box also Node, the tools and `npm ci`), then the one
# provisioning path the namespace lab uses too — `kubetun lab provision-node`
# (src/lab/provision.ts) — with pod servers and kubetun as systemd units.
#
#   bash lab/provision/node.sh NODE [NODES]     NODES: how many of the topology's nodes exist
set -euo pipefail
node_name=${1:?usage: node.sh NODE [NODES]}
nodes=${2:-${KUBETUN_NODES:-2}}
cd "$(dirname "$0")/../.."
export DEBIAN_FRONTEND=noninteractive
source lab/provision/hostname.sh
set_hostname "$node_name"

# The hooks: TUN, tc clsact (sch_ingress), u32 classifier, mirred redirect; kept across reboots.
modules=(tun sch_ingress cls_u32 act_mirred)
printf '%s\n' "${modules[@]}" >/etc/modules-load.d/kubetun.conf
for m in "${modules[@]}"; do modprobe "$m"; done

box_modules=/opt/kubetun-modules
if [ -d "$box_modules/node_modules" ]; then
  # The kubetun/debian12 box (scripts/box-build.sh): Node, the tools and the npm dependencies
  # are inside, and the addon built for this guest: no network.
  cmp -s package-lock.json "$box_modules/package-lock.json" ||
    echo "node.sh: the box's npm dependencies are from another package-lock.json: run scripts/box-build.sh again" >&2
  ln -sfn "$box_modules/node_modules" node_modules
  # The box's addon was compiled for it from the same sources (scripts/box-build.sh); the box
  # has no compiler, so other sources mean another box.
  addon_hash=$(cat binding.gyp src/tun/native/*.cc | sha256sum | cut -c1-16)
  if [ "$(cat "$box_modules/kubetun_tun.hash" 2>/dev/null)" = "$addon_hash" ]; then
    mkdir -p build/Release && cp "$box_modules/kubetun_tun.node" build/Release/
    echo "node.sh: the TUN addon from the box (sources $addon_hash)"
  else
    echo "node.sh: the box's TUN addon is from other sources ($(cat "$box_modules/kubetun_tun.hash" 2>/dev/null), these are $addon_hash): run scripts/box-build.sh again, then vagrant destroy -f && vagrant up" >&2
    exit 1
  fi
else
  # Any other Debian 13 box: Node >= 20 from the distribution (Debian 13 ships 20.x) and the
  # headers the addon builds against, then scripts/bootstrap.sh (apt tools, npm ci, the addon).
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nodejs npm ca-certificates >/dev/null
  fi
  if [ ! -d /usr/include/node ]; then
    apt-get install -y -qq --no-install-recommends libnode-dev >/dev/null ||
      echo "node.sh: no libnode-dev; node-gyp will download Node's headers"
  fi
  bash scripts/bootstrap.sh # apt tools (iproute2, tcpdump, iptables, ...), npm ci, the addon
fi

# The JS bundle every kubetun process starts from (build/js, rsynced from the host): built here
# only if the sources changed since (scripts/build-js.mjs; esbuild is among the box's modules).
if ! node --input-type=module -e "const m = await import('./scripts/build-js.mjs'); process.exit(m.bundleFresh() ? 0 : 1)"; then
  echo "node.sh: building the JS bundle for this guest"
  node scripts/build-js.mjs || echo "node.sh: kubetun runs from the sources through tsx (slow under emulation)"
fi

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
