"""What a bench script needs beyond kvbench-core, checked before it imports anything that needs it.

Every script in bench/ says in its docstring's first lines what it needs ("Needs: ...") and calls
``need`` with the same line before its other imports, so a missing plugin, extra or program stops it with
that one line and exit 2, not an ImportError traceback half-way through a measurement.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path


def need(line: str, *, modules: tuple[str, ...] = (), programs: tuple[str, ...] = ()) -> None:
    """Stop with ``<script>: needs <line> (missing: ...)`` unless every module imports and every program is
    on PATH (``a|b``: either module will do); ``line`` is what the script's docstring says it needs, install
    commands included."""
    missing = [name for name in modules if not any(importlib.util.find_spec(one) for one in name.split("|"))]
    missing += [f"{name} on PATH" for name in programs if shutil.which(name) is None]
    if missing:
        script = Path(sys.argv[0]).name
        print(f"{script}: needs {line} (missing: {', '.join(missing)})", file=sys.stderr)
        raise SystemExit(2)
