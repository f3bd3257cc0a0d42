"""The published result schema (kvbench_core/schemas/result.schema.json) and checking a document against it.

With ``KVBENCH_VALIDATE_RESULTS=1`` in the environment every result kvbench
writes is checked before it is written (the test suite sets it, so every
result any test writes, in-process or in a child process, is validated).
"""

from __future__ import annotations

import functools
import json
from importlib.resources import files
from typing import Any

#: Set to 1 to have ``write_result`` refuse a document the schema rejects.
VALIDATE_ENV = "KVBENCH_VALIDATE_RESULTS"


class ResultSchemaViolation(AssertionError):
    """kvbench built a result its own published schema rejects: a kvbench bug, never a user error."""


@functools.cache
def result_schema() -> dict[str, Any]:
    return json.loads((files("kvbench_core") / "schemas/result.schema.json").read_text())


def schema_violations(result: dict[str, Any]) -> list[str]:
    """``path: message`` for every place ``result`` breaks the schema (empty when it conforms)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(result_schema())
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in validator.iter_errors(result)]


def assert_conforms(result: dict[str, Any], where: str) -> None:
    violations = schema_violations(json.loads(json.dumps(result, default=str)))
    if violations:
        raise ResultSchemaViolation(f"{where}: the result does not match result.schema.json: "
                                    + "; ".join(violations[:5]))
