#!/usr/bin/env bash
# One command from a fresh checkout to the "curl works, ping doesn't" demo (as root, on Linux):
# install what is missing, bring the namespace lab up with kubetun on every node, run the demo.
# The lab stays up afterwards for exploring (kubetun lab status / exec); remove it with
#   node bin/kubetun.mjs lab down
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "demo.sh builds network namespaces and needs root (try: sudo bash scripts/demo.sh)" >&2
  exit 1
fi
bash scripts/bootstrap.sh
node bin/kubetun.mjs lab up
node bin/kubetun.mjs lab demo curl-vs-ping
