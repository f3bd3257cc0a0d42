"""Suite-wide: every result kvbench writes while the tests run is validated against the published schema.

Set in the environment (not patched in), so results written by kvbench child processes (CLI runs,
local clients, MPI ranks) are checked too; a non-conforming result fails the run that writes it.
"""

from __future__ import annotations

import os

from kvbench_core.results.result_schema import VALIDATE_ENV

os.environ[VALIDATE_ENV] = "1"
