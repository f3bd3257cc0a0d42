"""``--set PATH=VALUE``: edits of a raw spec before it is validated, with paths written as errors print them."""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml

from kvbench_core.contracts.errors import SpecError


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _parse_override_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``workload.users=20`` style overrides; list items by index, written as error messages write them
    (``cache.tiers[1].capacity=8GiB``) or dotted (``cache.tiers.1.capacity=8GiB``)."""
    spec = copy.deepcopy(raw)
    for override in overrides:
        if "=" not in override:
            raise SpecError(f"--set {override!r}: expected PATH=VALUE, e.g. workload.users=20")
        path, text = override.split("=", 1)
        parts = [part for part in re.sub(r"\[(-?\d+)\]", r".\1", path.strip()).split(".") if part]
        if not parts:
            raise SpecError(f"--set {override!r}: empty path")
        node: Any = spec
        for i, part in enumerate(parts[:-1]):
            node = _descend(node, part, parts[: i + 1], create=True)
        last = parts[-1]
        if isinstance(node, list):
            node[_index(node, last, parts)] = _parse_override_value(text)
        elif isinstance(node, dict):
            node[last] = _parse_override_value(text)
        else:
            raise SpecError(f"--set {'.'.join(parts)}: {'.'.join(parts[:-1])} is {node!r}, not a mapping")
    return spec


def _index(node: list[Any], part: str, parts: list[str]) -> int:
    """A list index as Python reads it: ``tiers[-1]`` is the last tier."""
    if not re.fullmatch(r"-?\d+", part) or not -len(node) <= int(part) < len(node):
        valid = f"0 to {len(node) - 1}, or -1 for the last" if node else "none: the list is empty"
        shown = re.sub(r"\.(-?\d+)(?=\.|$)", r"[\1]", ".".join(parts))
        raise SpecError(f"--set {shown}: no list item {part} (the list has {len(node)} items: {valid})")
    return int(part) % len(node)


def _descend(node: Any, part: str, parts: list[str], *, create: bool) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, parts)]
    if not isinstance(node, dict):
        raise SpecError(f"--set {'.'.join(parts)}: {'.'.join(parts[:-1]) or 'spec'} is not a mapping")
    if node.get(part) is None and create:
        node[part] = {}
    return node[part]
