"""Where kvbench may write: never into the OS, a virtual filesystem or a home directory itself.

One list for everything that writes files: the result writer (``output.directory``,
``output.io_log``) and the file tiers (``kvbench_nvme``, ``kvbench_gds``, which
also delete files there).  Paths are judged after resolving symlinks, so a
link to ``/etc`` is ``/etc``.
"""

from __future__ import annotations

import os
import re
from typing import Any

from kvbench_core.contracts.plugins import lookup

_VARIABLE = re.compile(r"\$(\w+|\{[^}]*\})")

#: Never write here or anywhere below: the OS, virtual filesystems, device nodes.
REFUSED_TREES = ("/etc", "/usr", "/boot", "/proc", "/sys", "/dev", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
                 "/libx32")
#: Shared-memory tmpfs is a legitimate RAM-disk tier even though it lives under /dev.
ALLOWED_TREES = ("/dev/shm",)
#: Never use these directories themselves (their subdirectories are fine).
REFUSED_EXACT = ("/", "/var", "/home", "/root", "/run", "/mnt", "/media", "/srv", "/opt")


def _within(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree + "/")


def unset_variable(path: str) -> str | None:
    """The first ``$VARIABLE`` in ``path`` that the environment does not set, if any."""
    for match in _VARIABLE.finditer(path):
        name = match.group(1).strip("{}")
        if name not in os.environ:
            return f"${match.group(1)}"
    return None


def expanded(path: str) -> str:
    """``path`` with ``~`` and ``$VARIABLE`` expanded (both, as a shell would)."""
    return os.path.expanduser(os.path.expandvars(path))


def resolved(path: str) -> str:
    """``path`` made absolute with every symlink resolved (for the part that exists)."""
    return os.path.realpath(os.path.abspath(expanded(path)))


def directory_option(tier: dict[str, Any]) -> str | None:
    """The name of the option holding the directory a spec's tier owns (its backend class's
    ``directory_option``: ``path`` for the file tiers, whatever a vendor tier calls it), when that option
    is given; None for a tier that owns no directory."""
    option = lookup("backend", tier["backend"], path="cache.tiers[].backend").directory_option
    return option if option is not None and isinstance((tier.get("options") or {}).get(option), str) else None


def tier_paths(tiers: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(field, path)`` of every enabled tier that keeps files in a directory (its ``directory_option``)."""
    return [(f"cache.tiers[{i}].options.{option}", tier["options"][option]) for i, tier in enumerate(tiers)
            if (option := directory_option(tier)) and tier.get("capacity") not in (0, "0")]


def overlap_reason(tiers: list[dict[str, Any]]) -> str | None:
    """Why two file tiers' directories collide (the same directory however written, or one inside the
    other: each would count and delete the other's files); None when they are apart."""
    seen: list[tuple[str, str, str]] = []
    for field, path in tier_paths(tiers):
        target = resolved(path)
        for other_field, other_path, other in seen:
            if target == other or _within(target, other) or _within(other, target):
                relation = "is the same directory as" if target == other else "overlaps"
                return (f"{field}: {path} ({target}) {relation} {other_field} ({other_path}); give each file tier "
                        "a directory of its own, apart from the others")
        seen.append((field, path, target))
    return None


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
