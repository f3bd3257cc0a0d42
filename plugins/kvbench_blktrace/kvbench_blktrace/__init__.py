"""kvbench-blktrace: block-layer and syscall latency histograms from bpftrace around the measured window.

The seed's L4 "device" time is what one file operation took through the
filesystem; it cannot say how much of that was the drive.  This plugin traces
the kernel's block-request tracepoints (insert, issue, complete) on the cache
directory's device and the file syscalls of the kvbench process, so a result
carries both views side by side.  Format of the result section: docs/block-trace.md.
"""
