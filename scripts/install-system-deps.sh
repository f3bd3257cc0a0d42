#!/usr/bin/env bash
# System packages the test suite needs on Debian 12: real servers and tools, never mocks.
#   redis-server  - the Redis tier's tests start real servers (standalone and a 3-node cluster)
#   fio           - the NVMe benchmark compares against fio; the fio distiller checks jobs with --parse-only
#   openmpi-bin, libopenmpi-dev - `mpirun -np 2 kvbench run` (mpi4py builds against it)
#   bpftrace      - block-layer tracing (tracing: block) and its live test
#   python3-venv  - Debian's python3 has no venv module without it
#   chromium      - the HTML report's test loads the page in real headless Chromium and takes a screenshot
#   strace        - tests/kvio/test_lmcache_io.py captures LMCache's own reads and writes and scores them
#   iproute2      - tests/scaleout/test_netns_mpi.py puts each MPI rank in its own network namespace (ip netns, veth)
set -euo pipefail
packages=(redis-server redis-tools fio openmpi-bin libopenmpi-dev bpftrace python3-venv chromium strace iproute2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "== system packages present"
  exit 0
fi
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
echo "== installing: ${missing[*]}"
$sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
# Debian starts a system redis on 6379 after install; the tests run their own on free ports.
