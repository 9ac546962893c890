#!/usr/bin/env bash
# The VM stage of the test suite (scripts/test.sh runs it after the main tests): builds the
# kubetun/debian12 box (cached: seconds when nothing changed), brings up node1, node2 and the
# client with `vagrant up --provider=libvirt` under QEMU inside the network namespace
# <prefix>virt (scripts/vm-host.sh), runs test/vms/*.test.ts against them and destroys them.
# Writes vitest's JSON report to the file given (scripts/test-summary.mjs counts it).
#
#   bash scripts/test-vms.sh [REPORT.json]     as root (scripts/test.sh runs it unless KUBETUN_VM_STAGE=0)
set -uo pipefail
cd "$(dirname "$0")/.."
report=${1:-.test-results/vms.json}
mkdir -p "$(dirname "$report")"
rm -f "$report"
if [ "$(id -u)" != 0 ]; then
  echo "vm stage: needs root (libvirtd, network namespaces); the namespace lab runs without VMs: kubetun lab up" >&2
  exit 1
fi
start=$(date +%s)
# libvirtd in its namespace, the box (cached), then which accelerator boots it — one line says
# which and why (scripts/vm-host.sh accel); the test brings the VMs up with it.
bash scripts/vm-host.sh start || exit 1
bash scripts/box-build.sh || { bash scripts/vm-host.sh stop; exit 1; }
KUBETUN_LIBVIRT_DRIVER=${KUBETUN_LIBVIRT_DRIVER:-$(bash scripts/vm-host.sh accel)} || { bash scripts/vm-host.sh stop; exit 1; }
export KUBETUN_LIBVIRT_DRIVER
echo "vm stage: box ready, driver $KUBETUN_LIBVIRT_DRIVER, $(($(date +%s) - start)) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
npx vitest run --config vitest.vms.config.ts --reporter=default --reporter=json --outputFile.json="$report"
status=$?
echo "vm stage: $(($(date +%s) - start)) s in all (load $(cut -d' ' -f1-3 /proc/loadavg))"
exit $status
