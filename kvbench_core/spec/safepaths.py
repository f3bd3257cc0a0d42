"""Where kvbench may write: never into the OS, a virtual filesystem or a home directory itself.

One list for everything that writes files: the result writer (``output.directory``,
``output.io_log``) and the file tiers (``kvbench_nvme``, ``kvbench_gds``, which
also delete files there).  Paths are judged after resolving symlinks, so a
link to ``/etc`` is ``/etc``.
"""

from __future__ import annotations

import os

#: Never write here or anywhere below: the OS, virtual filesystems, device nodes.
REFUSED_TREES = ("/etc", "/usr", "/boot", "/proc", "/sys", "/dev", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
                 "/libx32")
#: Shared-memory tmpfs is a legitimate RAM-disk tier even though it lives under /dev.
ALLOWED_TREES = ("/dev/shm",)
#: Never use these directories themselves (their subdirectories are fine).
REFUSED_EXACT = ("/", "/var", "/home", "/root", "/run", "/mnt", "/media", "/srv", "/opt")


def _within(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree + "/")


def resolved(path: str) -> str:
    """``path`` made absolute with every symlink resolved (for the part that exists)."""
    return os.path.realpath(os.path.abspath(os.path.expanduser(path)))


def refusal_reason(path: str) -> str | None:
    """Why the directory ``path`` (already resolved) must not receive kvbench's files; None if it may."""
    home = os.path.realpath(os.path.expanduser("~"))
    if path in REFUSED_EXACT or path == home:
        return "is a system or home directory; use a subdirectory dedicated to kvbench"
    if any(_within(path, tree) for tree in ALLOWED_TREES):
        return None
    if any(_within(path, tree) for tree in REFUSED_TREES):
        return "is inside a system directory"
    return None
