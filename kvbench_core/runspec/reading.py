"""Reading a spec file: strict YAML (duplicate keys refused, an alias-expansion budget), or a result's embedded spec."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import yaml

from kvbench_core.contracts.errors import InputFileError, SpecError


def parse_json_or_yaml(text: str) -> Any:
    """Strict YAML (a spec file, a command line's inline options).  JSON is YAML, but PyYAML needs ~1 s per
    30 KB: a result file (JSON) is parsed as JSON first."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass  # a YAML flow mapping, or broken JSON: YAML names the line
    try:
        return _load_within_budget(text, _FastStrictLoader)  # a SafeLoader that also refuses duplicate keys
    except yaml.YAMLError as error:
        _load_within_budget(text, _StrictLoader)  # PyYAML's own parser says what is wrong more plainly
        raise error from None


#: Most nodes a spec may hold, each alias counted as the nodes it stands for.  A real spec has a few hundred;
#: a "billion laughs" alias bomb has 10^9 and grew past 1.5 GB before anything refused it.
MAX_YAML_NODES = 100_000


def _load_within_budget(text: str, loader_class: type) -> Any:
    """Compose the YAML graph (aliases stay shared, so this is cheap), refuse it if its expansion exceeds
    ``MAX_YAML_NODES``, and only then build Python objects from it."""
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_node_budget(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_node_budget(root: yaml.Node) -> None:
    """Count ``root``'s expanded size in one pass over the shared graph (each node once, iteratively)."""
    expanded: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in expanded:
            continue
        children = [item for pair in node.value for item in pair] if isinstance(node, yaml.MappingNode) \
            else list(node.value) if isinstance(node, yaml.SequenceNode) else []
        if not children_done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in expanded)
            continue
        if any(id(child) not in expanded for child in children):
            raise yaml.constructor.ConstructorError(None, None, "an alias refers to a node that contains it",
                                                    node.start_mark)
        expanded[id(node)] = 1 + sum(expanded[id(child)] for child in children)
        if expanded[id(node)] > MAX_YAML_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"its aliases expand to more than {MAX_YAML_NODES:,} values (an alias bomb?); "
                            "a run spec needs a few hundred", node.start_mark)


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a key given twice in one mapping is an error, not "last one wins"."""


class _FastStrictLoader(getattr(yaml, "CSafeLoader", _StrictLoader)):  # type: ignore[misc]
    """The same on libyaml when present: 6x faster (most of a failing spec's time went into parsing)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            seen = first_line.get(key)
        except TypeError:  # an unhashable key: SafeLoader reports it below
            continue
        if seen is not None:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r} (first given on line {seen})",
                                                    key_node.start_mark)
        first_line[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_FastStrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_or_refuse(text: str, source: str, what: str) -> Any:
    """``parse_json_or_yaml``, with a text that cannot be parsed refused in one line: ``source:line:column:
    what: the problem`` (PyYAML's own message spans four lines with a caret drawing).  Spec files and a
    command line's inline options alike: one format for one mistake."""
    try:
        return parse_json_or_yaml(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise SpecError(f"{source}{where}: {what}: {problem}") from None
    except RecursionError:
        raise SpecError(f"{source}: {what}: values nested too deeply to parse") from None


def read_spec_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a YAML spec, or a result JSON whose embedded spec is to be re-run."""
    return _read_spec(path)[0]


def _read_spec(path: str | os.PathLike[str]) -> tuple[dict[str, Any], str | None, dict[str, Any] | None]:
    """The spec, and for a result file the folder its relative paths were resolved against and the result."""
    file = Path(path)
    try:
        text = file.read_text()
    except FileNotFoundError:
        raise InputFileError(f"{file}: spec file not found") from None
    except UnicodeDecodeError as error:
        raise InputFileError(f"{file}: not a text file (byte {error.start} is not UTF-8); a run spec is YAML") from None
    except OSError as error:
        raise InputFileError(f"{file}: cannot read spec: {error.strerror}") from None
    data = parse_or_refuse(text, str(file), "malformed YAML")
    if data is None:
        raise SpecError(f"{file}: the spec is empty; a run spec is a YAML mapping (see specs/quickstart.yaml)")
    if isinstance(data, dict) and "kvbench_result" in data:
        embedded = (data.get("spec") or {}).get("as_written") if isinstance(data.get("spec"), dict) else None
        if not isinstance(embedded, dict):
            raise SpecError(f"{file}: a kvbench result without an embedded spec (spec.as_written)")
        return copy.deepcopy(embedded), data["spec"].get("spec_dir"), data
    if not isinstance(data, dict):
        raise SpecError(f"{file}: expected a mapping at the top level, got {type(data).__name__}")
    return data, None, None
