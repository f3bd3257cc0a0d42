"""What tiers that keep entries in files share (nvme, gds, nixl POSIX, a vendor's file tier).

Directory safety and locking (``directory``, ``dirlock``), one-file-per-entry bookkeeping
(``entry_files``), what a path sits on and what its block device counted (``fsinfo``,
``diskstats``) and the host/device split of an entry's
parallel I/O (``accounting``).  In the core so that no tier plugin depends on another.
"""
