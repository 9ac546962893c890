#!/usr/bin/env bash
# Installs what kubetun needs on a fresh Debian/Ubuntu machine with Node >= 20, as root:
# the apt tools the lab and tests use, the npm dependencies and the native TUN addon.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_node_major=20
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt "$need_node_major" ]; then
  echo "kubetun needs Node >= $need_node_major (found: $(node -v 2>/dev/null || echo none))" >&2
  exit 1
fi

# Debian package -> a file it installs, so a second run asks apt nothing.
declare -A pkgs=(
  [iproute2]=/usr/sbin/ip
  [iptables]=/usr/sbin/iptables
  [nftables]=/usr/sbin/nft
  [tcpdump]=/usr/bin/tcpdump
  [dnsutils]=/usr/bin/dig
  [iputils-ping]=/usr/bin/ping
  [curl]=/usr/bin/curl
  [socat]=/usr/bin/socat
  [iperf3]=/usr/bin/iperf3
  [conntrack]=/usr/sbin/conntrack
  [procps]=/usr/bin/pgrep
  [kmod]=/usr/bin/kmod
  [util-linux]=/usr/bin/setpriv  # lab API mode: agents with exactly the DaemonSet's capabilities
  [python3]=/usr/bin/python3
  [make]=/usr/bin/make
  [g++]=/usr/bin/g++
  [liburing-dev]=/usr/include/liburing.h  # the TUN addon's batched writes (binding.gyp; without it: one write() per packet)
)
# Only the test suite needs these: a browser for the comparison report's page and Vagrant for
# `vagrant validate`. `bootstrap.sh --test` adds them; the demo does without.
if [ "${1:-}" = "--test" ]; then
  pkgs[chromium]=/usr/bin/chromium
  pkgs[vagrant]=/usr/bin/vagrant
  pkgs[ethtool]=/usr/sbin/ethtool  # test/lab/offload.test.ts: software segmentation on a veth
  pkgs[tshark]=/usr/bin/tshark  # test/pcap/pcapng.test.ts, test/lab/observe.test.ts: tshark -r reads kubetun tap's pcapng
fi
# The VM lab (docs/vagrant.md) and its test stage: libvirt + QEMU, vagrant-libvirt, and what
# scripts/box-build.sh makes the box with. `--test` includes them for the VM stage (on by
# default; KUBETUN_VM_STAGE=0 leaves it out: docs/vagrant.md).
if [ "${1:-}" = "--test" ] || [ "${1:-}" = "--vm" ]; then
  pkgs[vagrant]=/usr/bin/vagrant
  pkgs[vagrant-libvirt]=/usr/share/rubygems-integration/all/specifications/vagrant-libvirt-0.11.2.gemspec
  pkgs[libvirt-daemon-system]=/usr/sbin/libvirtd
  pkgs[libvirt-daemon-driver-qemu]=/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so
  pkgs[libvirt-clients]=/usr/bin/virsh
  pkgs[qemu-system-x86]=/usr/bin/qemu-system-x86_64
  pkgs[qemu-utils]=/usr/bin/qemu-img
  pkgs[dnsmasq-base]=/usr/sbin/dnsmasq
  pkgs[debootstrap]=/usr/sbin/debootstrap
  pkgs[rsync]=/usr/bin/rsync
  pkgs[e2fsprogs]=/usr/sbin/mkfs.ext4
fi

missing=()
for p in "${!pkgs[@]}"; do
  [ -e "${pkgs[$p]}" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# node-gyp needs Node's headers; use the distribution's when present so the build works offline,
# and let node-gyp fetch them otherwise.
if [ -d /usr/include/node ]; then export npm_config_nodedir=/usr; fi

lock_hash=$({ cat package-lock.json binding.gyp src/tun/native/*.cc 2>/dev/null || true; } | sha256sum | cut -c1-16)
stamp=node_modules/.kubetun-bootstrap
if [ "$(cat "$stamp" 2>/dev/null)" != "$lock_hash" ] || { [ -f binding.gyp ] && [ ! -f build/Release/kubetun_tun.node ]; }; then
  echo "bootstrap: npm ci (dependencies and the TUN addon)"
  npm ci --no-fund --no-audit --loglevel=error
  echo "$lock_hash" > "$stamp"
fi
# The prebuilt JS bundle bin/kubetun.mjs starts from (scripts/build-js.mjs; npm ci makes it):
# rebuilt when a source changed since, so every kubetun process starts without tsx.
if ! node --input-type=module -e "const m = await import('./scripts/build-js.mjs'); process.exit(m.bundleFresh() ? 0 : 1)"; then
  echo "bootstrap: building the JS bundle (build/js)"
  node scripts/build-js.mjs || true
fi
