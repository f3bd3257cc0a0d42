"""kvbench's NVMe / POSIX file tier, a separately installable plugin (backend name ``nvme``)."""
