"""``kvbench clean SPEC``: remove what earlier runs of a spec's tiers left behind, without running anything.

Opening a tier is what cleans: a file tier removes the files of a dead run found in its directory (its
lock proves the run is gone), a server tier removes what a run recorded as left over when its server
stopped answering (``kvbench_core.contracts.leftovers``).  So ``clean`` opens every persistent tier of the
spec, closes it at once, and prints what each removed; a tier that cannot be opened is the one error line
a run would give.  Memory tiers hold nothing after their process and are skipped.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.engine.run.factory import build_backend
from kvbench_core.engine.run.runner import new_run_id
from kvbench_core.runspec.loader import load_plan
from kvbench_core.runspec.safepaths import resolved


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("clean", help="remove what killed or cut-short runs of a spec's tiers left "
                                                 "behind (files, objects, keys)")
    parser.add_argument("spec", help="the run spec whose tiers to clean")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a spec value, as for run")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    _, plan = load_plan(args.spec, list(args.overrides))
    run_id = f"clean-{new_run_id()}"
    opened: list[tuple[Any, StorageBackend]] = []
    built = [(tier, build_backend(tier.backend, BackendContext(tier_name=tier.name, run_id=run_id, seed=plan.seed,
                                                               options_path=f"{tier.field}.options"),
                                  codec=tier.codec))
             for tier in plan.enabled_tiers if not tier.backend.cls.volatile and not _no_directory(tier)]
    try:
        for tier, backend in built:
            backend.open()
            opened.append((tier, backend))
    finally:
        for _, backend in opened:
            backend.close()
    said = [note for _, backend in opened for note in backend.notes()]
    for note in said:
        print(note)
    print(f"kvbench clean: {len(opened)} tier{'s' if len(opened) != 1 else ''} opened and closed"
          f"{'' if said else ', nothing was left behind'}")
    return 0


def _no_directory(tier: Any) -> bool:
    """A file tier whose directory does not exist holds nothing to clean (opening it would create it)."""
    option = tier.backend.cls.directory_option
    path = tier.backend.options.get(option) if option else None
    return isinstance(path, str) and not os.path.lexists(resolved(path))
