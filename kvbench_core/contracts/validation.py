"""JSON Schema validation with messages a person can act on.

``workload.users: expected integer >= 1, got "ten"`` rather than jsonschema's
raw wording; the path is dotted with ``[i]`` for list items.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.redact import redact_text


def json_path(parts: Iterable[Any], root: str = "") -> str:
    path = root
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path or "(top level)"


def _shown(value: Any) -> str:
    """The offending value as the message quotes it, credentials (URL passwords, keys) masked."""
    text = redact_text(json.dumps(value, default=str))
    return text if len(text) <= 60 else text[:57] + "..."


def _missing_field(error: ValidationError) -> str:
    """The field a ``required`` error is about (jsonschema only says it in the message)."""
    return error.message.split("'")[1] if "'" in error.message else error.message


def describe_error(error: ValidationError, root: str = "") -> str:
    """One line for one schema violation: the keyword's own wording, else jsonschema's message."""
    path = json_path(error.absolute_path, root)
    describer = _DESCRIBERS.get(error.validator)
    return (describer(error, path, root) if describer else None) or f"{path}: {error.message}"


def _type(error: ValidationError, path: str, root: str) -> str:
    expected, schema = error.schema.get("type"), error.schema
    bounds = [f"{op} {schema[key]}" for key, op in (("minimum", ">="), ("maximum", "<=")) if key in schema]
    expected_text = " or ".join(expected) if isinstance(expected, list) else str(expected)
    shown_bounds = " " + " and ".join(bounds) if bounds else ""
    return f"{path}: expected {expected_text}{shown_bounds}, got {_shown(error.instance)}"


def _bound(error: ValidationError, path: str, root: str) -> str:
    op = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[error.validator]
    return f"{path}: expected a value {op} {error.validator_value}, got {_shown(error.instance)}"


def _enum(error: ValidationError, path: str, root: str) -> str:
    choices = ", ".join(_shown(choice) for choice in error.validator_value)
    return f"{path}: expected one of {choices}, got {_shown(error.instance)}"


def _const(error: ValidationError, path: str, root: str) -> str:
    return f"{path}: expected {_shown(error.validator_value)}, got {_shown(error.instance)}"


def _required(error: ValidationError, path: str, root: str) -> str:
    return f"{json_path([*error.absolute_path, _missing_field(error)], root)}: required field is missing"


def _additional(error: ValidationError, path: str, root: str) -> str:
    value, allowed = error.instance, sorted(error.schema.get("properties", {}))
    extras = sorted(set(value) - set(allowed)) if isinstance(value, dict) else []
    where = json_path([*error.absolute_path, extras[0]], root) if extras else path
    hint = f" (allowed: {', '.join(allowed)})" if allowed else ""
    return f"{where}: unknown field{hint}"


def _pattern(error: ValidationError, path: str, root: str) -> str:
    hint = error.schema.get("description") or f"a string matching {error.validator_value}"
    return f"{path}: expected {hint}, got {_shown(error.instance)}"


def _length(error: ValidationError, path: str, root: str) -> str:
    if len(error.message) <= 80:
        return f"{path}: {error.message}"
    # jsonschema's message quotes the whole value (a list of 20 tier dicts): say the count instead
    bound = "at least" if error.validator.startswith("min") else "at most"
    unit = "items" if error.validator.endswith("Items") else "characters"
    return f"{path}: expected {bound} {error.validator_value} {unit}, got {len(error.instance)}"


def _alternatives(error: ValidationError, path: str, root: str) -> str | None:
    return _describe_alternatives(error, root) if error.context else None


def _not(error: ValidationError, path: str, root: str) -> str:
    return f"{path}: {error.schema.get('description') or 'value not allowed here'}, got {_shown(error.instance)}"


#: The JSON-Schema keywords worded here, one function each (None: jsonschema's own message).
_DESCRIBERS: dict[str, Callable[[ValidationError, str, str], str | None]] = {
    "type": _type, "minimum": _bound, "exclusiveMinimum": _bound, "maximum": _bound, "exclusiveMaximum": _bound,
    "enum": _enum, "const": _const, "required": _required, "additionalProperties": _additional,
    "pattern": _pattern, "minItems": _length, "maxItems": _length, "minLength": _length, "maxLength": _length,
    "oneOf": _alternatives, "anyOf": _alternatives, "not": _not,
}


#: Errors that only say "this branch does not apply to a value of this kind".
_MISMATCH = ("type", "const", "enum", "pattern", "oneOf", "anyOf")


def _describe_alternatives(error: ValidationError, root: str) -> str:
    """One line for a value that matches none of ``oneOf``/``anyOf``'s branches.

    The branch the value was meant for is the one that got further: an error
    deeper in the value (``autoscaler.options.low``) beats "expected null"; a
    bound violated by a value of the right type beats the other branches' type
    errors.  Otherwise the node's own description says what is accepted.
    """
    depth = len(error.absolute_path)
    deeper = [sub for sub in error.context if len(sub.absolute_path) > depth]
    if deeper:
        best = max(deeper, key=lambda sub: (len(sub.absolute_path), -len(sub.relative_schema_path)))
        return describe_error(best, root)
    if all(sub.validator == "required" for sub in error.context):
        fields = [json_path([*sub.absolute_path, _missing_field(sub)], root) for sub in error.context]
        return f"{fields[0]}: required field is missing (or give {' or '.join(fields[1:])} instead)"
    specific = [sub for sub in error.context if sub.validator not in _MISMATCH]
    if len(specific) == 1:
        return describe_error(specific[0], root)
    path, value = json_path(error.absolute_path, root), error.instance
    if error.schema.get("description"):
        return f"{path}: expected {error.schema['description']}, got {_shown(value)}"
    if all(sub.validator == "type" for sub in error.context):
        types: list[str] = []
        for sub in error.context:
            expected = sub.validator_value
            types.extend(expected if isinstance(expected, list) else [expected])
        return f"{path}: expected {' or '.join(dict.fromkeys(types))}, got {_shown(value)}"
    best = min(error.context, key=lambda sub: len(list(sub.relative_schema_path)))
    return describe_error(best, root)


def with_defaults(schema: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict: ``options`` with the ``default`` of every ``properties`` entry of ``schema`` filled where
    the key is absent, so a plugin's defaults live once, in its options schema, and a class built outside a
    spec (a bench script, a test) holds what a validated spec gives it.

    Nested objects: a value whose schema has ``properties`` of its own gets their defaults too (the synthetic
    source's ``multi_turn: {max_turns: 8}`` keeps the other multi-turn defaults), but a nested object the
    options leave out is created only where its own schema entry has a ``default`` (``{}`` says "the section
    with all its defaults").  Only plain ``properties`` are followed, not ``oneOf``/``anyOf`` branches: which
    branch applies is the validator's call.  Defaults are deep-copied, so no instance shares a list or dict
    with another or with the schema; ``options`` itself is not changed.
    """
    filled = dict(options)
    for key, prop in schema.get("properties", {}).items():
        if not isinstance(prop, Mapping):
            continue
        if key not in filled and "default" in prop:
            filled[key] = copy.deepcopy(prop["default"])
        if "properties" in prop and isinstance(filled.get(key), Mapping):
            filled[key] = with_defaults(prop, filled[key])
    return filled


def non_finite_numbers(instance: Any, root: str = "") -> list[str]:
    """NaN and infinity, wherever they are: JSON Schema cannot refuse them (every comparison with NaN is
    false, so ``minimum`` lets it through; ``.inf`` passes any lower bound), yet YAML accepts both."""
    found: list[tuple[list[Any], str]] = []
    stack: list[tuple[list[Any], Any]] = [([], instance)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            found.append((path, f"{json_path(path, root)}: expected a finite number, got {value}"))
        elif isinstance(value, dict):
            stack.extend(([*path, key], item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend(([*path, index], item) for index, item in enumerate(value))
    return [message for _, message in sorted(found, key=lambda item: str(item[0]))]


def _field_of(message: str) -> str:
    """The field a one-line message names: the text before its first ``": "``."""
    return message.partition(": ")[0]


def schema_errors(instance: Any, schema: dict[str, Any], root: str = "") -> list[str]:
    """The first failed rule of every field, one line each, most specific first.

    One mistake is one line: ``warmup: .inf`` fails "finite", "<= 2592000" and the type's own bound, but a
    person needs only the first to fix it (non-finite numbers first, as every later bound is meaningless for
    them); the others would read as three mistakes."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (list(e.absolute_path), e.validator))
    messages: list[str] = non_finite_numbers(instance, root)
    fields = {_field_of(message) for message in messages}
    for error in errors:
        message = describe_error(error, root)
        if not any(_same_mistake(_field_of(message), seen) for seen in fields):
            fields.add(_field_of(message))
            messages.append(message)
    return messages


def _same_mistake(field: str, seen: str) -> bool:
    """``field`` is ``seen``, or inside it: ``output.formats: ['', ''] has non-unique elements`` and then
    ``output.formats[0]: expected one of ...`` are one wrong value, told once (the first, the field's own)."""
    if field == seen or (bool(seen) and field.startswith((f"{seen}.", f"{seen}["))):
        return True
    element = re.compile(r"\[\d+\]$")  # two wrong elements of one list are one wrong value too
    return bool(element.search(field)) and element.sub("", field) == element.sub("", seen)


def validate_or_raise(instance: Any, schema: dict[str, Any], root: str = "") -> None:
    messages = schema_errors(instance, schema, root)
    if messages:
        raise SpecError("\n  ".join(messages) if len(messages) == 1 else
                        "invalid spec:\n  " + "\n  ".join(messages))
