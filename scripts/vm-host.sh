#!/usr/bin/env bash
# The libvirt side of the VM lab on a machine where test traffic may only go to loopback or into
# network namespaces the test made (this project's CI): libvirtd, virtlogd, every QEMU they start,
# libvirt's networks (bridges, dnsmasq) and Vagrant itself run inside one network namespace,
# <prefix>virt, that this script creates and removes. The host's own namespace gets no bridge,
# no address, no route; the VMs reach nothing but each other (the namespace has no uplink).
# Vagrant talks to libvirtd over its unix socket (a file, not the network), and must run in the
# namespace too, to reach the VMs' addresses by SSH: `vm-host.sh exec vagrant ...`.
#
#   bash scripts/vm-host.sh start            namespace, virtlogd, libvirtd (idempotent), and
#                                            which accelerator boots the box's kernel (accel)
#   bash scripts/vm-host.sh accel            KVM or QEMU's TCG: probed once, printed (kvm|qemu)
#   bash scripts/vm-host.sh exec CMD...      run CMD in the namespace (vagrant up, vagrant ssh),
#                                            with KUBETUN_LIBVIRT_DRIVER set from the probe
#   bash scripts/vm-host.sh stop             stop the daemons and QEMU, remove the namespace
#   bash scripts/vm-host.sh status
#
# systemd is not needed: the daemons are started by hand with their own pid files. libvirtd
# reads a qemu.conf of ours (root, no cgroups, no security driver: nothing here to confine
# against), bind-mounted over /etc/libvirt/qemu.conf inside the namespace's own mount namespace.
set -euo pipefail
prefix=${KUBETUN_LAB_PREFIX:-kt-}
ns=${prefix}virt
run=/run/kubetun-${prefix%-}virt
say() { echo "vm-host: $*" >&2; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# KVM or TCG. /dev/kvm may exist and still not boot a Linux guest (this project's CI machine:
# the guest hangs right after the decompressor), so boot the box's own kernel under KVM for a
# few seconds and look for its first message on the serial console. Cached for the session.
box_kernel() {
  local d=${VAGRANT_HOME:-$HOME/.vagrant.d}/boxes/kubetun-VAGRANTSLASH-debian12/0/libvirt
  [ -f "$d/vmlinuz" ] && echo "$d/vmlinuz"
}
# boots kvm|tcg KERNEL: the kernel's first console line within 20 s.
boots() {
  mkdir -p "$run"
  local cpu=max; [ "$1" = kvm ] && cpu=host
  rm -f "$run/$1-probe.log"
  timeout 20 qemu-system-x86_64 -accel "$1" -cpu "$cpu" -m 256 -display none -monitor none \
    -nic none -no-reboot -kernel "$2" -append 'console=ttyS0 panic=-1' \
    -serial "file:$run/$1-probe.log" >/dev/null 2>&1 || true
  grep -q 'Linux version' "$run/$1-probe.log" 2>/dev/null
}
accel() {
  if [ -f "$run/driver" ]; then cat "$run/driver"; return; fi
  local driver=qemu why
  local kernel; kernel=$(box_kernel || true)
  command -v qemu-system-x86_64 >/dev/null || {
    say "no qemu-system-x86_64: no VMs here (apt-get install qemu-system-x86, or scripts/bootstrap.sh --vm); the namespace lab needs none: kubetun lab up"
    exit 1
  }
  if [ ! -e /dev/kvm ]; then
    why="no /dev/kvm"
  elif [ -z "$kernel" ]; then
    why="no box kernel to probe KVM with yet (scripts/box-build.sh first)"
  elif boots kvm "$kernel"; then
    driver=kvm
  else
    why="/dev/kvm is there but a Linux guest does not boot under it (no kernel message within 20 s)"
  fi
  if [ "$driver" = qemu ] && [ -n "$kernel" ] && ! boots tcg "$kernel"; then
    say "$why, and the box's kernel does not boot under QEMU's TCG either: no VMs here; the namespace lab needs none: kubetun lab up"
    exit 1
  fi
  if [ "$driver" = qemu ]; then
    say "$why: the VMs run under QEMU's TCG (software emulation, tens of times slower than KVM: docs/vagrant.md, Timings); KUBETUN_LIBVIRT_DRIVER=kvm forces KVM"
  else
    say "KVM boots a guest here: the VMs run under KVM"
  fi
  mkdir -p "$run" && echo "$driver" >"$run/driver"
  echo "$driver"
}

start() {
  command -v libvirtd >/dev/null || { say "no libvirtd: apt-get install libvirt-daemon-system qemu-system-x86 (scripts/bootstrap.sh --vm)"; exit 1; }
  if alive "$run/libvirtd.pid"; then say "libvirtd already runs in $ns (pid $(cat "$run/libvirtd.pid"))"; return; fi
  if [ -S /run/libvirt/libvirt-sock ] && virsh -c qemu:///system version >/dev/null 2>&1; then
    say "a libvirtd not started by this script answers on /run/libvirt/libvirt-sock; stop it first"
    exit 1
  fi
  mkdir -p "$run"
  ip netns list | grep -qx "$ns" || ip netns add "$ns"
  ip -n "$ns" link set lo up
  cat >"$run/qemu.conf" <<CONF
# Written by scripts/vm-host.sh: QEMU as root, no cgroups (no systemd here), no confinement.
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
CONF
  ip netns exec "$ns" sh -c "
    mount --bind '$run/qemu.conf' /etc/libvirt/qemu.conf &&
    virtlogd -d -p '$run/virtlogd.pid' &&
    libvirtd -d -p '$run/libvirtd.pid'"
  for _ in $(seq 1 60); do
    virsh -c qemu:///system version >/dev/null 2>&1 && break
    sleep 0.5
  done
  virsh -c qemu:///system version >/dev/null || { say "libvirtd did not answer; see /var/log/libvirt/"; exit 1; }
  say "libvirtd $(cat "$run/libvirtd.pid") and virtlogd $(cat "$run/virtlogd.pid") run in network namespace $ns"
  if box_kernel >/dev/null; then accel >/dev/null; fi
}

stop() {
  if ip netns list | grep -qx "$ns"; then
    # QEMU first (destroy, not shutdown: whatever is left is abandoned), then the daemons.
    for d in $(virsh -c qemu:///system list --name 2>/dev/null); do virsh -c qemu:///system destroy "$d" >/dev/null || true; done
  fi
  for p in libvirtd virtlogd; do
    if alive "$run/$p.pid"; then kill "$(cat "$run/$p.pid")"; fi
  done
  for _ in $(seq 1 20); do alive "$run/libvirtd.pid" || alive "$run/virtlogd.pid" || break; sleep 0.5; done
  if ip netns list | grep -qx "$ns"; then
    for pid in $(ip netns pids "$ns"); do say "still in $ns: $(tr '\0' ' ' </proc/$pid/cmdline | cut -c1-80) ($pid): killing"; kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns"
  fi
  rm -rf "$run"
  say "stopped; network namespace $ns removed"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  accel) accel ;;
  exec)
    shift
    if [ -z "${KUBETUN_LIBVIRT_DRIVER:-}" ] && [ -f "$run/driver" ]; then
      KUBETUN_LIBVIRT_DRIVER=$(cat "$run/driver")
      export KUBETUN_LIBVIRT_DRIVER
    fi
    exec ip netns exec "$ns" "$@" ;;
  status) ip netns list | grep -qx "$ns" && alive "$run/libvirtd.pid" && { say "running in $ns"; exit 0; }; say "not running"; exit 1 ;;
  *) echo "usage: vm-host.sh start|stop|status|accel|exec CMD..." >&2; exit 2 ;;
esac
