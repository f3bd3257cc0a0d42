#!/usr/bin/env bash
# Needs: root (losetup, mount), fio, and the nvme plugin: pip install -e plugins/kvbench_nvme; apt-get install fio.
#
# kvbench's own ceiling, not the disk's (issue 32 §3): fio and the nvme tier side by side on a RAM-backed
# block device, so the device is faster than the tool and what is measured is the tool's CPU path.
#
#   sudo bash bench/ceiling.sh                       # from the repository root
#   SIZE_GIB=6 ENTRY=256MiB DEPTHS=1,16 REPEATS=7 sudo -E bash bench/ceiling.sh
#   DEVICE=zram PROCESSES=1 EXTRA="--repeats 5 --duration 20" sudo -E bash bench/ceiling.sh
#
# 1. a file of SIZE_GIB in /dev/shm (tmpfs), a loop device over it with direct I/O (the loop driver
#    reads and writes the tmpfs pages without a second page cache), ext4 on it, mounted at MNT; or, with
#    DEVICE=zram, an unused /dev/zram0 of SIZE_GIB (lz4) with ext4 on it.  The loop driver serves every
#    command of a device on one kernel worker thread, so it caps at one core whatever the number of
#    processes; zram serves each command in the submitting thread, so N processes can use N cores there;
# 2. 64 huge pages and a hugetlbfs for fio's buffers (contiguous, as kvbench's are: bench/nvme_vs_fio.py);
# 3. bench/nvme_vs_fio.py there: O_DIRECT and buffered, both engines, queue depths DEPTHS, 1 and 2 streams,
#    REPEATS interleaved repeats each; the samples go to OUT (docs/bench/ceiling-<time>-c<streams>.json);
# 4. unmounts and detaches everything it made (also on failure or Ctrl-C).
# With PROCESSES=1 it runs bench/worker_processes.py on the device instead of step 3 (EXTRA: its options,
# e.g. "--repeats 3 --duration 20"): one run's read bandwidth over 1 and 2 worker processes.
set -euo pipefail
cd "$(dirname "$0")/.."
need() { echo "ceiling.sh: needs root (losetup, mount), fio, and the nvme plugin: pip install -e plugins/kvbench_nvme; apt-get install fio (missing: $1)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || need "root"
for program in losetup mkfs.ext4 mount fio; do command -v "$program" >/dev/null || need "$program on PATH"; done
PYTHON=${PYTHON:-.venv/bin/python}
"$PYTHON" -c "import kvbench_nvme" 2>/dev/null || need "kvbench_nvme"

SIZE_GIB=${SIZE_GIB:-6}
ENTRY=${ENTRY:-256MiB}
DEPTHS=${DEPTHS:-1,16}
REPEATS=${REPEATS:-7}
STREAMS=${STREAMS:-1 2}
EXTRA=${EXTRA:-}  # more nvme_vs_fio.py options, e.g. "--entries-per-stream 8"
DEVICE=${DEVICE:-loop}  # loop (a loop device over a tmpfs file) or zram (/dev/zram0)
MNT=${MNT:-/mnt/kvbench-ceiling}
IMAGE=/dev/shm/kvbench-ceiling-$$.img
HUGE=/mnt/kvbench-ceiling-huge-$$
OUT=${OUT:-docs/bench/ceiling-$(date -u +%Y-%m-%d-%H%M)}
LOOP=""
ZRAM=""

cleanup() {
    mountpoint -q "$MNT" && umount "$MNT"
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    [ -n "$ZRAM" ] && echo 1 > "/sys/block/$ZRAM/reset"
    rm -f "$IMAGE"
    mountpoint -q "$HUGE" && umount "$HUGE"
    rmdir "$HUGE" "$MNT" 2>/dev/null || true
}
trap cleanup EXIT

[ -e "$MNT" ] && ! rmdir "$MNT" 2>/dev/null && { echo "ceiling.sh: $MNT exists and is not an empty directory; set MNT" >&2; exit 2; }
if [ "$DEVICE" = zram ]; then
    [ -e /sys/block/zram0 ] || { echo "ceiling.sh: DEVICE=zram needs /dev/zram0 (modprobe zram)" >&2; exit 2; }
    [ "$(cat /sys/block/zram0/disksize)" = 0 ] || { echo "ceiling.sh: /dev/zram0 is in use (disksize set); reset it or use DEVICE=loop" >&2; exit 2; }
    ZRAM=zram0
    echo lz4 > /sys/block/zram0/comp_algorithm
    echo "${SIZE_GIB}G" > /sys/block/zram0/disksize
    BLOCK=/dev/zram0
else
    truncate -s "${SIZE_GIB}G" "$IMAGE"
    LOOP=$(losetup --find --show --direct-io=on "$IMAGE")
    BLOCK=$LOOP
fi
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$BLOCK"
mkdir -p "$MNT" "$HUGE"
mount "$BLOCK" "$MNT"
[ "$(cat /proc/sys/vm/nr_hugepages)" -ge 64 ] || echo 64 > /proc/sys/vm/nr_hugepages
mount -t hugetlbfs none "$HUGE"

if [ -n "$ZRAM" ]; then where="$BLOCK (zram, lz4)"; else where="$BLOCK over $IMAGE (tmpfs)"; fi
echo "RAM device: $where, ext4 at $MNT; load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${PROCESSES:-}" ]; then  # instead of fio: one run over 1 and 2 worker processes (workers.processes)
    # shellcheck disable=SC2086  # EXTRA is a list of options
    "$PYTHON" bench/worker_processes.py --dir "$MNT/kv" $EXTRA
    exit 0
fi
for streams in $STREAMS; do
    # shellcheck disable=SC2086  # EXTRA is a list of options
    "$PYTHON" bench/nvme_vs_fio.py --dir "$MNT/bench" --entry-size "$ENTRY" --concurrency "$streams" \
        --queue-depths "$DEPTHS" --modes direct,buffered --repeats "$REPEATS" --fio-hugetlbfs "$HUGE" \
        --json "$OUT-c$streams.json" --markdown $EXTRA
done
