"""Re-running a result (``kvbench run RESULT.json``): the embedded spec must be the one that ran.

A result carries its spec as written and that spec's sha256.  Before the spec
is re-run, the hash is recomputed and the format version checked, so an edited
``as_written`` (say ``workload.users``), a zeroed or missing hash, or a format
this kvbench does not know is refused with the mismatch named, instead of
being run and stamped with a fresh hash.  ``--accept-edited-spec`` runs it
anyway, and the new result records under ``run.rerun_of`` that it did.
"""

from __future__ import annotations

import re
from typing import Any

from kvbench_core.contracts.errors import SpecError
from kvbench_core.runspec.loader import spec_sha256

#: Result formats whose embedded spec this kvbench re-runs (the spec section is the same in all of them).
KNOWN_FORMATS = (1, 2)
OVERRIDE_FLAG = "--accept-edited-spec"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def spec_mismatch(result: dict[str, Any]) -> str | None:
    """Why the result's embedded spec cannot be trusted to be the one that ran, or None."""
    version = result.get("kvbench_result")
    if version not in KNOWN_FORMATS:
        return (f"kvbench_result is {version!r}, a format this kvbench does not read "
                f"(it knows {', '.join(map(str, KNOWN_FORMATS))})")
    section = result.get("spec") or {}
    recorded = section.get("sha256")
    if not isinstance(recorded, str) or not recorded:
        return "spec.sha256 is missing: nothing proves spec.as_written is the spec that ran"
    if not _SHA256.match(recorded) or recorded == "0" * 64:
        return f"spec.sha256 is {recorded!r}, not the hash of any spec"
    computed = spec_sha256(section["as_written"])
    if computed != recorded:
        return (f"spec.as_written hashes to {computed[:12]}…, not to the recorded spec.sha256 {recorded[:12]}…: "
                "the embedded spec was edited after the run")
    return None


def verify_rerun(result: dict[str, Any], file: str, *, accept_edited: bool) -> dict[str, Any]:
    """The ``run.rerun_of`` record of re-running ``result``; refuses an unverifiable one unless accepted."""
    mismatch = spec_mismatch(result)
    if mismatch and not accept_edited:
        raise SpecError(f"{file}: {mismatch}; to run its spec anyway pass {OVERRIDE_FLAG} "
                        "(the new result then records that the spec was edited)")
    section = result.get("spec") or {}
    return {"file": file, "recorded_sha256": section.get("sha256") if isinstance(section.get("sha256"), str) else None,
            "recorded_format": result.get("kvbench_result"), "spec_sha256": spec_sha256(section["as_written"]),
            "edited": mismatch is not None, "mismatch": mismatch}
