#!/usr/bin/env bash
# Needs: an NVIDIA GPU with its driver (nvidia-smi), python3 and pip access to the registry: it installs kvbench, the nvme and gds tiers, kvikio and torch into VENV.
# One prepared check of the gds tier on a GPU host (kvbench has not run it on a GPU yet).
#
#   bash bench/gds_gpu_check.sh                 # from the repository root
#   KVBENCH_GDS_DIR=/mnt/nvme/kvbench bash bench/gds_gpu_check.sh
#
# 1. installs kvbench, the nvme and gds tiers and the kvikio + torch wheels (CUDA_EXTRA=cu12|cu13)
#    into a venv (VENV, default .venv-gds);
# 2. records the GDS environment: nvidia-smi, nvidia-fs, gdscheck, kvikio's own verdict;
# 3. runs the gds tier's tests (the real-GPU ones are no longer skipped) and `kvbench plugins --conformance gds`;
# 4. a short GPU -> GDS run of specs/gds.yaml;
# 5. bandwidth of the gds tier (host- and GPU-origin payloads, GPU-tensor demotion) against the
#    POSIX nvme tier (O_DIRECT + fsync) on the same directory, same entries.
# Results go to $OUT (or bench/out-gds-<time>); each step logs and goes on, the exit code is the
# number of failed steps.  Budget: about 5-8 minutes on an H100/H200 with a local NVMe.
set -uo pipefail
cd "$(dirname "$0")/.."
for program in nvidia-smi python3; do
    command -v "$program" >/dev/null || { echo "gds_gpu_check.sh: needs an NVIDIA GPU with its driver (nvidia-smi), python3 and pip access to the registry (missing: $program on PATH)" >&2; exit 2; }
done
OUT=${OUT:-bench/out-gds-$(date +%Y%m%d-%H%M%S)}
DIR=${KVBENCH_GDS_DIR:-/mnt/nvme/kvbench-gds-check}
VENV=${VENV:-.venv-gds}
CUDA_EXTRA=${CUDA_EXTRA:-cu12}
ENTRY_MIB=${ENTRY_MIB:-64}
ENTRIES=${ENTRIES:-32}
mkdir -p "$OUT" "$DIR" || { echo "cannot create $OUT or $DIR" >&2; exit 1; }
failed=0
step() {  # step NAME COMMAND...: run, tee its log to $OUT/NAME.log, count failures
  local name=$1; shift
  echo "== $name"
  if "$@" > >(tee "$OUT/$name.log") 2>&1; then echo "== $name: ok"; else echo "== $name: FAILED"; failed=$((failed + 1)); fi
}

install() {
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q --upgrade pip &&
    "$VENV/bin/pip" install -q -e . -e plugins/kvbench_nvme -e "plugins/kvbench_gds[$CUDA_EXTRA]" \
      pytest pytest-timeout
}
environment() {
  nvidia-smi || true
  (lsmod | grep -E '^nvidia_fs' || echo "nvidia_fs module: not loaded")
  for tool in /usr/local/cuda/gds/tools/gdscheck gdscheck; do
    if command -v "$tool" >/dev/null 2>&1; then "$tool" -p; break; fi
  done
  findmnt -T "$DIR" || true
  "$VENV/bin/python" - <<'PY'
import json, kvikio, kvikio.defaults, kvikio.cufile_driver
report = {"kvikio": kvikio.__version__, "compat_mode": str(kvikio.defaults.get("compat_mode")),
          "compat_mode_preferred": kvikio.defaults.is_compat_mode_preferred()}
try:
    report["is_gds_available"] = kvikio.cufile_driver.get("is_gds_available")
    report["libcufile"] = kvikio.cufile_driver.libcufile_version()
except Exception as error:  # the report is the point: keep whatever kvikio says
    report["cufile_error"] = repr(error)
print(json.dumps(report, indent=2))
PY
}
tests() {
  KVBENCH_GDS_DIR="$DIR" "$VENV/bin/pytest" -q -rs plugins/kvbench_gds tests/contracts/test_conformance_builtin.py
}
check() {
  "$VENV/bin/kvbench" plugins --conformance gds --options "{path: $DIR/check, payload_origin: gpu}"
}
short_run() {
  "$VENV/bin/kvbench" run specs/gds.yaml --quiet --output "$OUT/run" \
    --set duration=45s --set warmup=10s --set cache.tiers.0.capacity=2GiB \
    --set "cache.tiers.1.options.path=$DIR/run" --set cache.tiers.1.capacity=32GiB
}
bandwidth() {
  OUT="$OUT" DIR="$DIR" ENTRY_MIB="$ENTRY_MIB" ENTRIES="$ENTRIES" "$VENV/bin/python" - <<'PY'
"""Same entries, same directory: nvme (POSIX O_DIRECT + fsync) vs gds in each payload origin."""
import json, os, time
from concurrent.futures import ThreadPoolExecutor
from kvbench_core.contracts.backend import DISCARD, BackendContext
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.builtins.memory import GPUMemoryBackend
from kvbench_gds.backend import GDSBackend
from kvbench_nvme.backend import NVMeBackend

size, count, threads = int(os.environ["ENTRY_MIB"]) << 20, int(os.environ["ENTRIES"]), 4
pool = NoisePool(seed=1, max_piece=16 << 20)
tiers = {
    "nvme_odirect": (NVMeBackend, {"direct": True, "fsync": True, "transfer_size": "16MiB", "queue_depth": 4}),
    "gds_host_origin": (GDSBackend, {"payload_origin": "host"}),
    "gds_gpu_origin": (GDSBackend, {"payload_origin": "gpu"}),
    "gds_from_gpu_tensor": (GDSBackend, {}),
}
hbm = GPUMemoryBackend({"device": "cuda"}, BackendContext(tier_name="hbm", run_id="bw"))
hbm.open()
keys = [f"e{i}" for i in range(count)]
for key in keys[:threads]:
    hbm.write(key, pool.payload(key, size))
report = {"entry_bytes": size, "entries": count, "threads": threads, "tiers": {}}
for name, (cls, options) in tiers.items():
    backend = cls({"path": os.path.join(os.environ["DIR"], name), **options},
                  BackendContext(tier_name=name, run_id="bw", concurrency=threads))
    backend.open()
    def write(key):
        if name == "gds_from_gpu_tensor":
            return backend.write_tensor(key, hbm.tensor(keys[int(key[1:]) % threads]))
        return backend.write(key, pool.payload(key, size))
    rows = {}
    def read(key):
        return backend.read(key, size, DISCARD)  # the bytes land in GPU memory (gds) or the host buffer
    for op, fn in (("write", write), ("read", read)):
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as executor:
            timings = list(executor.map(fn, keys))
        wall = time.perf_counter() - start
        rows[op] = {"GBps": round(size * count / wall / 1e9, 3), "wall_s": round(wall, 3),
                    "device_s": round(sum(t.device for t in timings), 3), "host_s": round(sum(t.host for t in timings), 3)}
    rows["describe"] = backend.describe()
    backend.close()
    report["tiers"][name] = rows
    print(f"{name:22} write {rows['write']['GBps']:7.2f} GB/s   read {rows['read']['GBps']:7.2f} GB/s   "
          f"{rows['describe'].get('access_mechanism', '')}")
hbm.close()
with open(os.path.join(os.environ["OUT"], "bandwidth.json"), "w") as handle:
    json.dump(report, handle, indent=2, default=str)
PY
}

step install install
step environment environment
step tests tests
step plugins_check check
step short_run short_run
step bandwidth bandwidth
echo "results in $OUT; $failed step(s) failed"
exit "$failed"
