"""JSON Schema validation with messages a person can act on.

``workload.users: expected integer >= 1, got "ten"`` rather than jsonschema's
raw wording; the path is dotted with ``[i]`` for list items.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from kvbench_core.errors import SpecError


def json_path(parts: Iterable[Any], root: str = "") -> str:
    path = root
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path or "(top level)"


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_error(error: ValidationError, root: str = "") -> str:
    """One line for one schema violation."""
    path = json_path(error.absolute_path, root)
    schema, value, kind = error.schema, error.instance, error.validator
    if kind == "type":
        expected = schema.get("type")
        bounds = []
        if "minimum" in schema:
            bounds.append(f">= {schema['minimum']}")
        if "maximum" in schema:
            bounds.append(f"<= {schema['maximum']}")
        expected_text = " or ".join(expected) if isinstance(expected, list) else str(expected)
        return f"{path}: expected {expected_text}{' ' + ' and '.join(bounds) if bounds else ''}, got {_shown(value)}"
    if kind in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        op = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[kind]
        return f"{path}: expected a value {op} {error.validator_value}, got {_shown(value)}"
    if kind == "enum":
        choices = ", ".join(_shown(choice) for choice in error.validator_value)
        return f"{path}: expected one of {choices}, got {_shown(value)}"
    if kind == "const":
        return f"{path}: expected {_shown(error.validator_value)}, got {_shown(value)}"
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return f"{json_path([*error.absolute_path, missing], root)}: required field is missing"
    if kind == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extras = sorted(set(value) - set(allowed)) if isinstance(value, dict) else []
        where = json_path([*error.absolute_path, extras[0]], root) if extras else path
        hint = f" (allowed: {', '.join(allowed)})" if allowed else ""
        return f"{where}: unknown field{hint}"
    if kind == "pattern":
        hint = schema.get("description") or f"a string matching {error.validator_value}"
        return f"{path}: expected {hint}, got {_shown(value)}"
    if kind in ("minItems", "maxItems", "minLength", "maxLength"):
        return f"{path}: {error.message}"
    if kind in ("oneOf", "anyOf") and error.context:
        best = min(error.context, key=lambda sub: len(list(sub.relative_schema_path)))
        return describe_error(best, root)
    if kind == "not":
        return f"{path}: {schema.get('description') or 'value not allowed here'}, got {_shown(value)}"
    return f"{path}: {error.message}"


def schema_errors(instance: Any, schema: dict[str, Any], root: str = "") -> list[str]:
    """Every violation, most specific first, as one-line messages."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (list(e.absolute_path), e.validator))
    messages: list[str] = []
    for error in errors:
        message = describe_error(error, root)
        if message not in messages:
            messages.append(message)
    return messages


def validate_or_raise(instance: Any, schema: dict[str, Any], root: str = "") -> None:
    messages = schema_errors(instance, schema, root)
    if messages:
        raise SpecError("\n  ".join(messages) if len(messages) == 1 else
                        "invalid spec:\n  " + "\n  ".join(messages))
