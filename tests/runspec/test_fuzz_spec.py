"""Bad run specs, fuzzed: every mutation of a valid spec ends in one clear error, never in a run.

Hypothesis starts from a valid spec (a DRAM tier over a directory tier, both
inside the test's own directory) and breaks it one way at a time: a wrong
type, a missing or unknown key, a number out of range, a bad unit, an unknown
plugin, a huge value, malformed YAML.  ``kvbench run`` (in-process, for speed,
plus a few real subprocesses) must then answer with exit code 2, a
``kvbench: error:`` message that names the field (or the file and line for
YAML), no traceback, and no file written anywhere: the output directory, the
tier directory and the working directory stay exactly as they were.

The number of cases run is printed at the end of the module (``pytest -s``)
and recorded in docs/RELIABILITY.md.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvbench_core.cli import main
from kvbench_core.contracts.plugins import registry

pytestmark = pytest.mark.skipif(importlib.util.find_spec("kvbench_nvme") is None,
                                reason="the kvbench-nvme plugin is not installed")

#: Cases run per category, printed at the end of the module.
CASES: Counter[str] = Counter()
#: Examples per property in the default suite; ``slow`` runs use FUZZ_SLOW_EXAMPLES.
FUZZ_EXAMPLES = int(os.environ.get("KVBENCH_FUZZ_EXAMPLES", "40"))
FUZZ_SLOW_EXAMPLES = int(os.environ.get("KVBENCH_FUZZ_SLOW_EXAMPLES", "80"))
#: Where every fuzzed spec points its tier and output directories; must stay empty.  Created at import
#: because hypothesis builds its strategies once, before any fixture exists.
FUZZ_ROOT = Path(tempfile.mkdtemp(prefix="kvbench-fuzz-"))

JsonPath = tuple[str | int, ...]


def base_spec(root: Path) -> dict[str, Any]:
    """A valid spec whose every output lands under ``root`` (which the test then checks stays empty)."""
    return {
        "version": 1,
        "name": "fuzz",
        "seed": 3,
        "model": {"name": "tiny-1b", "dtype": "bf16", "tp": 1},
        "requests": 20,
        "trials": 1,
        "verify": False,
        "on_error": "stop",
        "workload": {
            "source": "synthetic", "users": 2, "users_scope": "per_client", "mode": "mixed", "generation": "none",
            "decode_batch": 32, "max_inflight": 2,
            "options": {
                "profiles": {"chatbot": {"context": [16, 32], "generate": [1, 8], "think_s": [0, 0]}},
                "profile_mix": {"chatbot": 1},
                "multi_turn": {"enabled": True, "turn_tokens": [4, 8]},
                "prefix_caching": {"enabled": True, "prompts": 4, "probability": 0.5, "prefix_tokens": [4, 8]},
            },
        },
        "cache": {
            "promotion": "none",
            "eviction": {"target_usage_ratio": 0.8, "large_entry_limit_ratio": 0.95, "max_recursion_depth": 10,
                         "max_evictions": 5000},
            "tiers": [
                {"name": "dram", "backend": "cpu", "capacity": "1MiB", "options": {}},
                {"name": "nvme", "backend": "nvme", "capacity": "64MiB", "cold_after": "30s",
                 "options": {"path": str(root / "tier"), "fsync": False, "drop_cache": False, "direct": False,
                             "transfer_size": "1MiB", "queue_depth": 1}},
            ],
        },
        "output": {"directory": str(root / "out"), "formats": ["json"], "keep_files": False, "progress": "off",
                   "interval": 1.0},
    }


# -- paths ---------------------------------------------------------------------------------------------

def dotted(path: JsonPath) -> str:
    """The JSON path as kvbench's messages write it: ``cache.tiers[1].options.path``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def get_at(spec: Any, path: JsonPath) -> Any:
    for part in path:
        spec = spec[part]
    return spec


def set_at(spec: dict[str, Any], path: JsonPath, value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    node: Any = spec
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return spec


def delete_at(spec: dict[str, Any], path: JsonPath) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    node: Any = spec
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    return spec


# -- bad values by kind ---------------------------------------------------------------------------------

PRINTABLE = st.characters(min_codepoint=32, max_codepoint=0x2FFF, exclude_categories=("Cs",))
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
#: Strictly negative (hypothesis may offer -0.0 for "below 0", and -0.0 >= 0 is a valid value).
NEGATIVE = st.floats(max_value=0, exclude_max=True, allow_nan=False, allow_infinity=False).filter(lambda x: x < 0)
NOT_SCALAR = st.one_of(st.lists(st.integers(), max_size=3), st.dictionaries(st.text(PRINTABLE, max_size=5),
                                                                            st.integers(), max_size=2))
FRACTION = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9).filter(
    lambda x: not float(x).is_integer())
HUGE_INT = st.integers(min_value=10**18, max_value=10**400)


@dataclass(frozen=True)
class Nested:
    """A list nested ``depth`` levels deep (``[[[...1...]]]``), written into the YAML text directly:
    PyYAML cannot even dump such a value, and kvbench must still reject it cleanly."""

    depth: int

    @property
    def placeholder(self) -> str:
        return f"__nested_{self.depth}__"

    @property
    def flow(self) -> str:
        return "[" * self.depth + "1" + "]" * self.depth


#: Shallow enough to parse (the schema then rejects it), or far too deep for any parser.
NESTED = st.one_of(st.integers(min_value=20, max_value=120), st.integers(min_value=1000, max_value=5000)).map(Nested)
NOT_BOOL = st.one_of(st.integers(), st.text(PRINTABLE, max_size=8), st.none(), FRACTION, NOT_SCALAR)
NOT_NUMBER = st.one_of(st.text(PRINTABLE, max_size=8), st.booleans(), st.none(), NOT_SCALAR)


def bad_int(minimum: int, maximum: int | None) -> st.SearchStrategy[Any]:
    """Integers out of range (huge ones included), non-integral or non-finite numbers, other types."""
    choices = [st.integers(max_value=minimum - 1), FRACTION, NON_FINITE, NOT_NUMBER, NESTED]
    if maximum is not None:
        choices += [st.integers(min_value=maximum + 1, max_value=maximum + 10**6), HUGE_INT]
    return st.one_of(choices)


def bad_number(minimum: float, maximum: float | None, *, exclusive_min: bool) -> st.SearchStrategy[Any]:
    below = st.floats(max_value=minimum, allow_nan=False, allow_infinity=False, exclude_max=not exclusive_min
                      ).filter(lambda x: x <= minimum if exclusive_min else x < minimum)
    choices = [below, NON_FINITE, NOT_NUMBER]
    if maximum is not None:
        choices.append(st.floats(min_value=maximum, exclude_min=True, allow_nan=False, allow_infinity=False))
    return st.one_of(choices)


def bad_enum(allowed: list[Any]) -> st.SearchStrategy[Any]:
    text = st.text(PRINTABLE, max_size=12).filter(lambda s: s not in allowed)
    return st.one_of(text, st.integers(min_value=2), FRACTION, NOT_SCALAR)


#: Units neither a size nor a duration knows ("M" is a size, "1" just more digits: both are valid somewhere).
BAD_UNIT_WORDS = ["XB", "Gi", "PB", "PiB", "EiB", "bytes", "parsecs", "GiBs", "gb/s", "iB", "KB B", "sec", "hours",
                  "d", "w", "fortnights", "msec", "S", "H", "mins", "µs", "ns", "us", "e3", "-", "GiB!"]
BAD_UNIT_STRINGS = st.one_of(
    st.builds(lambda n, unit: f"{n}{unit}", st.integers(min_value=0, max_value=10**6), st.sampled_from(BAD_UNIT_WORDS)),
    st.builds(lambda n: f"-{n}", st.integers(min_value=1, max_value=10**6).map(str).map(lambda s: s + "s")),
    st.sampled_from(["", "GiB", "1.5.2GiB", "1e3", "0x10", "ten seconds", "1,5s", ".5s", "5.s", "∞", "NaN", "inf"]),
)


def bad_duration() -> st.SearchStrategy[Any]:
    return st.one_of(NEGATIVE, st.integers(max_value=-1), NON_FINITE, BAD_UNIT_STRINGS, st.booleans(), st.none(),
                     NOT_SCALAR)


def bad_size(*, auto: bool) -> st.SearchStrategy[Any]:
    strings = BAD_UNIT_STRINGS.filter(lambda s: not (auto and s == "auto"))
    return st.one_of(st.integers(max_value=-1), FRACTION, NON_FINITE, strings, st.booleans(), st.none(), NOT_SCALAR)


def bad_name() -> st.SearchStrategy[Any]:
    """Not a tier name: empty, or with a character outside [A-Za-z0-9_.-] (path separators included)."""
    outside = st.text(PRINTABLE, min_size=1, max_size=20).filter(
        lambda s: any(not (c.isascii() and (c.isalnum() or c in "_.-")) for c in s))
    return st.one_of(st.just(""), outside, st.just("../../etc"), st.integers(), st.none(), NOT_SCALAR)


def bad_run_name() -> st.SearchStrategy[Any]:
    """Not a run name (it becomes part of the result file's name)."""
    unsafe = st.text(PRINTABLE, min_size=1, max_size=30).filter(lambda s: any(c in s for c in "/\\\n\t"))
    return st.one_of(st.just(""), st.sampled_from(["../../escape", "/etc/passwd", ".hidden", " x", "a/b", "..", "."]),
                     unsafe, st.text(st.sampled_from("abc"), min_size=101, max_size=5000), st.integers(),
                     st.none(), NOT_SCALAR)


#: Directories no output may go to (and the home directory itself).
SYSTEM_DIRECTORIES = ["/", "/etc", "/etc/kvbench", "/usr", "/usr/local/kvbench", "/boot", "/proc", "/proc/self",
                      "/sys/kernel", "/dev", "/dev/kvbench", "/bin", "/lib", "/root", "/home", "~", "/var", "/opt"]


def unknown_plugin(kind: str) -> st.SearchStrategy[str]:
    installed = set(registry(kind))
    return st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=16).filter(
        lambda s: s not in installed)


#: (path, strategy of invalid values) for every field the fuzzer corrupts.
FIELDS: list[tuple[JsonPath, Callable[[], st.SearchStrategy[Any]]]] = [
    (("version",), lambda: st.one_of(st.integers().filter(lambda n: n != 1), st.text(PRINTABLE, max_size=4),
                                     FRACTION, st.none())),
    (("seed",), lambda: bad_int(0, None)),
    (("requests",), lambda: bad_int(1, None)),
    (("trials",), lambda: bad_int(1, 100)),
    (("clients",), lambda: bad_int(1, 1024)),
    (("duration",), bad_duration),
    (("warmup",), bad_duration),
    (("trial_pause",), bad_duration),
    (("verify",), lambda: NOT_BOOL),
    (("on_error",), lambda: bad_enum(["stop", "count"])),
    (("model", "tp"), lambda: bad_int(1, 1024)),
    (("model", "dtype"), lambda: bad_enum(["fp32", "fp16", "bf16", "fp8", "int8"])),
    (("workload", "users"), lambda: bad_int(1, 1_000_000)),
    (("workload", "users_scope"), lambda: bad_enum(["per_client", "split"])),
    (("workload", "mode"), lambda: bad_enum(["mixed", "prefill-only", "decode-only"])),
    (("workload", "generation"), lambda: st.one_of(
        NEGATIVE, NON_FINITE,
        st.text(PRINTABLE, max_size=8).filter(lambda s: s not in ("none", "fast", "realistic")))),
    (("workload", "decode_batch"), lambda: bad_int(1, None)),
    (("workload", "max_inflight"), lambda: bad_int(0, 4096)),
    (("workload", "options", "prefix_caching", "probability"), lambda: bad_number(0, 1, exclusive_min=False)),
    (("workload", "options", "prefix_caching", "prompts"), lambda: bad_int(1, 1000)),
    (("workload", "options", "multi_turn", "enabled"), lambda: NOT_BOOL),
    (("cache", "promotion"), lambda: bad_enum(["none", "on_read"])),
    (("cache", "eviction", "target_usage_ratio"), lambda: bad_number(0, 1, exclusive_min=True)),
    (("cache", "eviction", "large_entry_limit_ratio"), lambda: bad_number(0, 1, exclusive_min=True)),
    (("cache", "eviction", "max_recursion_depth"), lambda: bad_int(1, 100)),
    (("cache", "eviction", "max_evictions"), lambda: bad_int(1, None)),
    (("cache", "tiers", 0, "name"), bad_name),
    (("cache", "tiers", 0, "capacity"), lambda: bad_size(auto=True)),
    (("cache", "tiers", 1, "capacity"), lambda: bad_size(auto=True)),
    (("cache", "tiers", 1, "cold_after"), bad_duration),
    (("cache", "tiers", 1, "options", "path"), lambda: st.one_of(st.just(""), st.integers(), st.none(), NOT_SCALAR)),
    (("cache", "tiers", 1, "options", "fsync"), lambda: NOT_BOOL),
    (("cache", "tiers", 1, "options", "drop_cache"), lambda: NOT_BOOL),
    (("cache", "tiers", 1, "options", "transfer_size"), lambda: st.one_of(
        bad_size(auto=False), st.sampled_from(["0", "0B", "2GiB", "1TiB", "1025MiB", 0, 2**31, 10**30]))),
    (("cache", "tiers", 1, "options", "queue_depth"), lambda: bad_int(1, 256)),
    (("output", "formats"), lambda: st.one_of(
        st.lists(st.text(PRINTABLE, max_size=6).filter(lambda s: s not in ("json", "xlsx", "png")), min_size=1,
                 max_size=3), st.text(PRINTABLE, max_size=6), st.just(["json", "json"]))),
    (("output", "keep_files"), lambda: NOT_BOOL),
    (("output", "progress"), lambda: st.text(PRINTABLE, max_size=8).filter(lambda s: s not in ("auto", "on", "off"))),
    (("output", "interval"), lambda: bad_number(0, None, exclusive_min=True)),
    (("output", "directory"), lambda: st.one_of(st.integers(), st.none(), st.booleans(), NOT_SCALAR,
                                                 st.sampled_from(SYSTEM_DIRECTORIES))),
    (("output", "io_log"), lambda: st.one_of(st.integers(), st.none(), NOT_SCALAR, st.sampled_from(
        [f"{directory.rstrip('/')}/kvbench-io.jsonl" for directory in SYSTEM_DIRECTORIES if directory != "~"]))),
    (("name",), bad_run_name),
]

#: Required fields: deleting one must be reported as missing (the message names it).
REQUIRED: list[tuple[JsonPath, str]] = [
    (("version",), "version"),
    (("cache",), "cache"),
    (("cache", "tiers"), "cache.tiers"),
    (("cache", "tiers", 0, "name"), "cache.tiers[0].name"),
    (("cache", "tiers", 1, "backend"), "cache.tiers[1].backend"),
    (("cache", "tiers", 1, "options", "path"), "cache.tiers[1].options.path"),
    (("requests",), "requests"),
    (("model",), "model"),
    (("model", "name"), "model"),
]

#: Mappings that accept only the keys their schema names.
CLOSED_MAPPINGS: list[JsonPath] = [
    (), ("model",), ("workload",), ("workload", "options"), ("workload", "options", "multi_turn"),
    ("workload", "options", "prefix_caching"), ("workload", "options", "profiles", "chatbot"), ("cache",),
    ("cache", "eviction"), ("cache", "tiers", 0), ("cache", "tiers", 1), ("cache", "tiers", 0, "options"),
    ("cache", "tiers", 1, "options"), ("output",),
]

#: Objects replaced wholesale by a value of the wrong type.
CONTAINERS: list[JsonPath] = [("model",), ("workload",), ("workload", "options"), ("cache",), ("cache", "tiers"),
                           ("cache", "tiers", 0), ("cache", "eviction"), ("cache", "tiers", 1, "options"),
                           ("output",)]

#: Lines that make any YAML document malformed wherever they are inserted.
YAML_BREAKERS = ["key: [unclosed, list", "  bad: {unclosed", "a: b: c", "\tindented: with a tab", '"unterminated',
                 "- [1, 2", "}", "]", "*undefined_alias", "? [1, 2", "@reserved", "`backtick", "x: 'open"]


@dataclass
class Case:
    """One corrupted spec: the document (or raw text) and what the error message must name."""

    kind: str
    expect: list[str]  # every string must appear in the error message
    spec: dict[str, Any] | None = None
    text: str | None = None


def field_case(draw: st.DrawFn, root: Path) -> Case:
    path, bad = draw(st.sampled_from(FIELDS))
    value = draw(bad())
    spec = set_at(base_spec(root), path, value)
    if isinstance(value, Nested) and value.depth >= 1000:
        return Case("huge value", ["spec.yaml", "malformed"], spec)
    leaf = str(path[-1])
    if path[:2] == ("cache", "tiers") and len(path) > 3:  # a plugin option may be checked by the backend itself
        return Case("wrong value", [leaf], spec)
    return Case("wrong value", [dotted(path)], spec)


def missing_case(draw: st.DrawFn, root: Path) -> Case:
    path, named = draw(st.sampled_from(REQUIRED))
    return Case("missing key", [named], delete_at(base_spec(root), path))


def unknown_key_case(draw: st.DrawFn, root: Path) -> Case:
    where = draw(st.sampled_from(CLOSED_MAPPINGS))
    spec = base_spec(root)
    node = get_at(spec, where)
    key = draw(st.from_regex(r"[a-z_][a-z0-9_]{0,15}", fullmatch=True).filter(lambda k: k not in node))
    known = _known_keys(where)
    assume(key not in known)
    return Case("unknown key", [dotted((*where, key))], set_at(spec, (*where, key), draw(st.integers())))


@functools.cache
def _known_keys(where: JsonPath) -> frozenset[str]:
    """Keys the schema allows at ``where`` (absent from the base spec, so the fuzzer must not add them)."""
    from kvbench_core.runspec.spec_schema import full_schema

    node: Any = full_schema()
    for part in where:
        if isinstance(part, int):
            node = node["items"]
            continue
        props = _properties(node)
        node = props[part] if part in props else node["additionalProperties"]
    return frozenset(_properties(node))


def _properties(schema: dict[str, Any]) -> dict[str, Any]:
    """Every property a (composed) object schema names, including its if/then and oneOf branches."""
    props = dict(schema.get("properties", {}))
    for branch in schema.get("allOf", []) + schema.get("oneOf", []) + schema.get("anyOf", []):
        props.update(_properties(branch.get("then", branch)))
    return props


def wrong_container_case(draw: st.DrawFn, root: Path) -> Case:
    path = draw(st.sampled_from(CONTAINERS))
    original = get_at(base_spec(root), path)
    wrong = st.one_of(st.text(PRINTABLE, max_size=8), st.integers(), st.none(), st.booleans(),
                      st.lists(st.integers(), max_size=2) if isinstance(original, dict) else
                      st.dictionaries(st.just("a"), st.integers(), max_size=1))
    value = draw(wrong)
    if path == ("cache", "tiers") and value == []:
        value = None
    return Case("wrong type", [dotted(path)], set_at(base_spec(root), path, value))


def unknown_plugin_case(draw: st.DrawFn, root: Path) -> Case:
    spec = base_spec(root)
    where = draw(st.sampled_from(["backend", "source", "autoscaler"]))
    name = draw(unknown_plugin(where))
    if where == "backend":
        index = draw(st.sampled_from([0, 1]))
        tier = {"name": spec["cache"]["tiers"][index]["name"], "backend": name, "capacity": "1MiB"}
        return Case("unknown plugin", [f"cache.tiers[{index}].backend", "unknown backend"],
                    set_at(spec, ("cache", "tiers", index), tier))
    if where == "source":
        workload = {**spec["workload"], "source": name, "options": {}}
        return Case("unknown plugin", ["workload.source", "unknown source"], set_at(spec, ("workload",), workload))
    return Case("unknown plugin", ["autoscaler.name", "unknown autoscaler"],
                set_at(spec, ("autoscaler",), {"name": name}))


def unknown_model_case(draw: st.DrawFn, root: Path) -> Case:
    name = draw(st.from_regex(r"[a-z][a-z0-9-]{2,20}", fullmatch=True).filter(lambda n: n not in _catalog()))
    return Case("unknown model", ["model.name", name], set_at(base_spec(root), ("model", "name"), name))


def _catalog() -> set[str]:
    from kvbench_core.runspec.geometry import catalog

    return set(catalog())


def too_many_tiers_case(draw: st.DrawFn, root: Path) -> Case:
    count = draw(st.integers(min_value=17, max_value=400))
    tiers = [{"name": f"t{i}", "backend": "cpu", "capacity": "1MiB"} for i in range(count)]
    return Case("huge value", ["cache.tiers"], set_at(base_spec(root), ("cache", "tiers"), tiers))


def duplicate_tier_case(draw: st.DrawFn, root: Path) -> Case:
    spec = base_spec(root)
    spec["cache"]["tiers"][1]["name"] = spec["cache"]["tiers"][0]["name"]
    return Case("cross-field", ["cache.tiers", "unique"], spec)


def malformed_yaml_case(draw: st.DrawFn, root: Path) -> Case:
    lines = yaml.safe_dump(base_spec(root), sort_keys=False).splitlines()
    at = draw(st.integers(min_value=0, max_value=len(lines)))
    broken = "\n".join([*lines[:at], draw(st.sampled_from(YAML_BREAKERS)), *lines[at:]]) + "\n"
    return Case("malformed YAML", ["malformed YAML", "spec.yaml:"], text=broken)


def duplicate_key_case(draw: st.DrawFn, root: Path) -> Case:
    lines = yaml.safe_dump(base_spec(root), sort_keys=False).splitlines()
    top = [i for i, line in enumerate(lines) if line and not line.startswith((" ", "-"))]
    index = draw(st.sampled_from(top))
    key = lines[index].split(":")[0]
    end = next((i for i in top if i > index), len(lines))
    block = lines[index:end]
    return Case("duplicate key", [key, "spec.yaml:", "duplicate"], text="\n".join(lines + block) + "\n")


def not_a_mapping_case(draw: st.DrawFn, root: Path) -> Case:
    text = draw(st.sampled_from(["", "# only a comment\n", "- a\n- b\n", "42\n", "just a string\n", "null\n",
                                 "[1, 2]\n", "~\n"]))
    return Case("not a mapping", ["spec.yaml"], text=text)


CASE_MAKERS = [field_case] * 6 + [missing_case, unknown_key_case, unknown_key_case, wrong_container_case,
                                  unknown_plugin_case, unknown_model_case, too_many_tiers_case, duplicate_tier_case,
                                  malformed_yaml_case, malformed_yaml_case, duplicate_key_case, not_a_mapping_case]


@st.composite
def bad_specs(draw: st.DrawFn, root: Path) -> Case:
    return draw(st.sampled_from(CASE_MAKERS))(draw, root)


# -- running --------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


def run_in_process(args: list[str]) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exit_:  # argparse
            code = exit_.code if isinstance(exit_.code, int) else 1
    return Outcome(code, out.getvalue(), err.getvalue())


def tree(root: Path) -> list[str]:
    """Everything under ``root``, relative, sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def write_case(case: Case, path: Path) -> None:
    if case.text is not None:
        path.write_text(case.text)
        return
    nested: list[Nested] = []

    def placeholders(value: Any) -> Any:
        if isinstance(value, Nested):
            nested.append(value)
            return value.placeholder
        if isinstance(value, dict):
            return {key: placeholders(item) for key, item in value.items()}
        if isinstance(value, list):
            return [placeholders(item) for item in value]
        return value

    text = yaml.safe_dump(placeholders(case.spec), sort_keys=False, allow_unicode=True)
    for value in nested:
        text = text.replace(value.placeholder, value.flow)
    path.write_text(text)


def check_rejected(case: Case, outcome: Outcome, spec_path: Path) -> None:
    shown = f"case {case.kind}: {(case.text or json.dumps(case.spec, default=str))[:600]}"
    assert outcome.code == 2, f"{shown}\nexit {outcome.code}\nstdout {outcome.stdout[-800:]}\nstderr {outcome.stderr}"
    assert "Traceback" not in outcome.stderr, f"{shown}\n{outcome.stderr}"
    assert outcome.stderr.startswith("kvbench: error: "), f"{shown}\n{outcome.stderr}"
    assert outcome.stderr.count("\n") == 1, f"{shown}\none mistake, one line:\n{outcome.stderr}"
    message = outcome.stderr.removeprefix("kvbench: error: ")
    message = message.replace(str(spec_path), "spec.yaml")
    for expected in case.expect:
        assert expected in message, f"{shown}\nexpected {expected!r} in the error:\n{outcome.stderr}"
    assert outcome.stdout == "", f"{shown}\nstdout: {outcome.stdout}"


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty working directory ``work``; spec files go next to it, never inside what is checked."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    yield tmp_path


class Accepted(Exception):
    """kvbench took a bad spec and was about to run it."""


def _refuse_to_run(*_: Any, **__: Any) -> None:
    raise Accepted("the spec passed validation: kvbench would have run it")


def _fuzz(sandbox: Path, case: Case) -> None:
    spec_path = sandbox / "spec.yaml"
    write_case(case, spec_path)
    # A mutation kvbench wrongly accepts fails at once instead of running (maybe for days: warmup: 10**6).
    with mock.patch("kvbench_core.cli.run_cmd.run_session", _refuse_to_run):
        try:
            outcome = run_in_process(["run", str(spec_path), "--quiet"])
        except Accepted:
            pytest.fail(f"kvbench accepted a bad spec ({case.kind}): "
                        f"{(case.text or json.dumps(case.spec, default=str))[:800]}")
    CASES[case.kind] += 1
    check_rejected(case, outcome, spec_path)
    assert tree(FUZZ_ROOT) == [], f"case {case.kind} left files: {tree(FUZZ_ROOT)}"
    assert tree(sandbox / "work") == [], f"case {case.kind} wrote into the working directory"


FUZZ_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]}


@settings(max_examples=FUZZ_EXAMPLES, **FUZZ_SETTINGS)
@given(case=bad_specs(FUZZ_ROOT))
def test_every_bad_spec_is_one_clear_error_and_writes_nothing(sandbox: Path, case: Case) -> None:
    _fuzz(sandbox, case)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@settings(max_examples=FUZZ_SLOW_EXAMPLES, **FUZZ_SETTINGS)
@given(case=bad_specs(FUZZ_ROOT))
def test_many_more_bad_specs(sandbox: Path, case: Case) -> None:
    _fuzz(sandbox, case)


# -- a few through a real process, and the same checks on --set ------------------------------------------

SUBPROCESS_CASES = [
    ("workload.users=0", "workload.users"),
    ("duration=.nan", "duration"),
    pytest.param("cache.tiers.1.capacity=8 parsecs", "cache.tiers[1].capacity", marks=pytest.mark.slow),
    pytest.param("cache.tiers.0.backend=tape", "cache.tiers[0].backend", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("override", "field"), SUBPROCESS_CASES)
def test_bad_spec_in_a_real_process(sandbox: Path, override: str, field: str) -> None:
    spec_path = sandbox / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(base_spec(FUZZ_ROOT), sort_keys=False))
    done = subprocess.run([sys.executable, "-m", "kvbench_core.cli", "run", str(spec_path), "--set", override],
                          capture_output=True, text=True, timeout=120, cwd=sandbox / "work")
    CASES["subprocess"] += 1
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("kvbench: error: ") and field in done.stderr, done.stderr
    assert tree(FUZZ_ROOT) == [] and tree(sandbox / "work") == []


NON_FINITE_OVERRIDES = [
    ("warmup=.inf", "warmup"), ("seed=.nan", "seed"), ("workload.users=.inf", "workload.users"),
    ("trials=.inf", "trials"), ("requests=.inf", "requests"), ("model.tp=.nan", "model.tp"),
    ("cache.tiers[0].capacity=.inf", "cache.tiers[0].capacity"), ("cache.tiers[1].capacity=-.inf",
                                                                  "cache.tiers[1].capacity"),
    ("workload.max_inflight=.nan", "workload.max_inflight"),
]


@pytest.mark.parametrize(("override", "field"), NON_FINITE_OVERRIDES)
def test_a_non_finite_number_is_one_line_naming_its_field(sandbox: Path, override: str, field: str) -> None:
    """A field fails "finite", then its bound, then its type's bound: the first failed rule is reported, once
    (before, two or three lines for one mistake)."""
    spec_path = sandbox / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(base_spec(FUZZ_ROOT), sort_keys=False))
    outcome = run_in_process(["run", str(spec_path), "--dry-run", "--set", override])
    CASES["non-finite override"] += 1
    assert outcome.code == 2
    (line,) = outcome.stderr.splitlines()
    assert line.startswith(f"kvbench: error: {field}: expected a finite number, got "), line
    assert tree(FUZZ_ROOT) == [] and tree(sandbox / "work") == []


def test_unreadable_spec_files(sandbox: Path) -> None:
    """Binary junk, a directory, a missing file: one line each, exit 2."""
    junk = sandbox / "junk.yaml"
    junk.write_bytes(b"\xff\xfe\x00\x81 not text \xc3\x28")
    for path, expected in ((junk, "junk.yaml"), (sandbox / "missing.yaml", "not found"), (sandbox, str(sandbox))):
        outcome = run_in_process(["run", str(path)])
        CASES["unreadable file"] += 1
        assert outcome.code == 2, outcome
        assert "Traceback" not in outcome.stderr and expected in outcome.stderr, outcome.stderr


@pytest.fixture(scope="module", autouse=True)
def report_cases() -> Iterator[None]:
    yield
    shutil.rmtree(FUZZ_ROOT, ignore_errors=True)
    total = sum(CASES.values())
    by_kind = ", ".join(f"{kind} {count}" for kind, count in sorted(CASES.items()))
    print(f"\nspec fuzzing: {total} bad specs rejected ({by_kind})")


# -- malformed traces, model configs and manifests: file, line and field ----------------------------------

BAD_TRACES = {
    # file name, content, "file:line" suffix, the field named
    "sharegpt.json": ('[\n {"id": "a", "conversations": [\n   {"from": "human", "value": "hi"},\n'
                      '   {"from": "gpt", "value": 42}]}\n]\n', ":2:", "conversations[1].value"),
    "roles.json": ('[\n {"id": "a", "conversations": [{"from": "human", "value": "hi"}]},\n'
                   ' {"id": "b", "conversations": [{"from": "wizard", "value": "hi"}]}\n]\n', ":3:",
                   "conversations[0].from"),
    "burstgpt.csv": ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "0,ChatGPT,12,4,16,Conversation log\n5,ChatGPT,x,4,16,Conversation log\n", ":3:",
                     "Request tokens"),
    "mooncake.jsonl": ('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
                       '{"timestamp": 5, "input_length": -3, "output_length": 5, "hash_ids": [1]}\n', ":2:",
                       "input_length"),
    "broken.jsonl": ('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
                     '{"timestamp": 5, "input_length": 10\n', ":2:", "invalid JSON"),
}


@pytest.mark.parametrize("name", list(BAD_TRACES))
def test_a_malformed_trace_names_file_line_and_field(sandbox: Path, name: str) -> None:
    pytest.importorskip("kvbench_workloads", reason="the kvbench-workloads plugin is not installed")
    content, line, field = BAD_TRACES[name]
    path = sandbox / name
    path.write_text(content)
    outcome = run_in_process(["workload", "stats", str(path)])
    CASES["malformed trace"] += 1
    assert outcome.code == 2, outcome
    assert outcome.stderr.startswith(f"kvbench: error: {path}{line} ") and field in outcome.stderr, outcome.stderr
    assert "Traceback" not in outcome.stderr


def test_a_run_over_a_malformed_trace_stops_before_touching_storage(sandbox: Path) -> None:
    pytest.importorskip("kvbench_workloads", reason="the kvbench-workloads plugin is not installed")
    content, _, _ = BAD_TRACES["mooncake.jsonl"]
    (sandbox / "trace.jsonl").write_text(content)
    spec = base_spec(FUZZ_ROOT)
    spec["workload"] = {"source": "mooncake", "options": {"path": str(sandbox / "trace.jsonl")}}
    spec_path = sandbox / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    outcome = run_in_process(["run", str(spec_path), "--quiet"])
    CASES["malformed trace"] += 1
    assert outcome.code == 2
    assert outcome.stderr == f"kvbench: error: {sandbox / 'trace.jsonl'}:2: input_length: expected a whole number " \
                             ">= 0, got -3\n"
    assert not (FUZZ_ROOT / "tier").exists()  # no tier was opened
    assert not (FUZZ_ROOT / "out").exists()  # nothing was measured: no result, as for a spec error (issue #29)


def test_a_missing_trace_is_one_line_and_writes_no_result(sandbox: Path) -> None:
    """A missing trace file was refused (exit 2) after a result file had been written for it."""
    pytest.importorskip("kvbench_workloads", reason="the kvbench-workloads plugin is not installed")
    spec = base_spec(FUZZ_ROOT)
    spec["workload"] = {"source": "mooncake", "options": {"path": "missing.jsonl"}}
    spec_path = sandbox / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    outcome = run_in_process(["run", str(spec_path), "--quiet"])
    CASES["missing trace"] += 1
    assert outcome.code == 2
    assert outcome.stderr == f"kvbench: error: {sandbox / 'missing.jsonl'}: no such trace file or directory\n"
    assert tree(FUZZ_ROOT) == [] and tree(sandbox / "work") == []


BAD_CONFIGS = {
    "wrong type": ('{\n  "model_type": "llama",\n  "num_hidden_layers": "32",\n  "num_attention_heads": 8,\n'
                   '  "hidden_size": 512\n}\n', "config.json:3: field 'num_hidden_layers' must be an integer"),
    "zero heads": ('{\n  "model_type": "llama",\n  "num_hidden_layers": 2,\n  "hidden_size": 512,\n'
                   '  "num_attention_heads": 0\n}\n', "config.json:5: field 'num_attention_heads'"),
    "text_config": ('{"model_type": "mm",\n "text_config": {\n  "num_hidden_layers": 2,\n  "num_attention_heads": 8,'
                    '\n  "hidden_size": 512,\n  "torch_dtype": "float42"}}\n', "config.json:6: field 'torch_dtype'"),
    "syntax": ('{\n  "num_hidden_layers": 2,\n  "hidden_size": 512\n  "num_attention_heads": 8\n}\n',
               "config.json: line 4: invalid JSON"),
    "missing": ('{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 512}\n',
                "config.json: field 'num_attention_heads' is missing"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_malformed_model_config_names_file_line_and_field(sandbox: Path, case: str) -> None:
    content, expected = BAD_CONFIGS[case]
    (sandbox / "config.json").write_text(content)
    outcome = run_in_process(["models", "show", str(sandbox / "config.json")])
    CASES["malformed model config"] += 1
    assert outcome.code == 2, outcome
    assert outcome.stderr.replace(str(sandbox) + "/", "").startswith(f"kvbench: error: {expected}"), outcome.stderr
    assert "Traceback" not in outcome.stderr


def test_a_malformed_manifest_names_file_line_and_field(sandbox: Path) -> None:
    recorded = run_in_process(["project", "--model", "tiny-1b", "--tokens", "1024", "--chunk-tokens", "256",
                               "--record", str(sandbox / "manifest.json")])
    assert recorded.code == 0, recorded
    lines = (sandbox / "manifest.json").read_text().splitlines()
    index = max(i for i, line in enumerate(lines) if '"bytes":' in line)
    lines[index] = lines[index].replace('"bytes":', '"bytes":"many","old_bytes":')
    (sandbox / "manifest.json").write_text("\n".join(lines) + "\n")
    outcome = run_in_process(["replay", str(sandbox / "manifest.json"), "--tier", "{backend: cpu}"])
    CASES["malformed manifest"] += 1
    assert outcome.code == 2, outcome
    assert outcome.stderr.startswith(f"kvbench: error: {sandbox / 'manifest.json'}:{index + 1}: objects["), \
        outcome.stderr
    assert "bytes" in outcome.stderr
    assert "Traceback" not in outcome.stderr


def test_a_huge_model_config_is_refused_before_it_is_read(sandbox: Path) -> None:
    """A model config is kilobytes: a 1 GiB file (sparse here) is refused at once, naming its size, instead of
    being read and parsed whole (16 s and 2.1 GB of memory before)."""
    huge = sandbox / "config.json"
    with huge.open("wb") as handle:
        handle.truncate(1 << 30)
    outcome = run_in_process(["models", "show", str(huge)])
    CASES["malformed model config"] += 1
    assert outcome.code == 2
    assert outcome.stderr == (f"kvbench: error: {huge}: 1,073,741,824 bytes is too large for a model config "
                              "(at most 1,048,576 bytes)\n")


def test_a_run_name_in_other_scripts_is_refused_saying_ascii(sandbox: Path) -> None:
    """The run name becomes file names that travel (S3 keys, shared file systems, archives): it stays ASCII, and
    the refusal says so ("up to 100 letters" read as a lie to ``Zürich run 東京``); description takes any text."""
    spec_path = sandbox / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(base_spec(FUZZ_ROOT), sort_keys=False))
    outcome = run_in_process(["run", str(spec_path), "--dry-run", "--set", "name=Zürich run 東京"])
    assert outcome.code == 2
    (line,) = outcome.stderr.splitlines()
    assert line.startswith("kvbench: error: name: expected a run name") and "up to 100 ASCII letters" in line
    assert tree(FUZZ_ROOT) == [] and tree(sandbox / "work") == []


# -- specs drawn from the composed JSON Schema itself, valid and mutated (issue #29) ---------------------------

#: Strings the schema leaves free but only a few values of which mean anything: drawn from the installed
#: plugins and the model catalogue most of the time, so many drawn specs get past the names to the rest.
NAMED_STRINGS: dict[str, list[str]] = {"backend": sorted(registry("backend")) or ["cpu"],
                                        "source": sorted(registry("source")) or ["synthetic"]}
#: A junk value a mutation puts anywhere.
JUNK = st.one_of(st.none(), st.just([]), st.just({}), st.text(PRINTABLE, max_size=6), st.integers(-10**6, -1),
                 st.floats(allow_nan=True, allow_infinity=True), st.booleans(), HUGE_INT)
#: Letters only: a drawn free string is never a path outside the sandbox's working directory.
WORDS = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz_-"), min_size=1, max_size=10)


@st.composite
def from_schema(draw: st.DrawFn, schema: dict[str, Any], name: str = "", depth: int = 0) -> Any:
    """A value the (composed) schema describes: every branch of oneOf/anyOf, each optional property half the
    time, an ``allOf`` ``if``/``then`` branch's properties when its ``if`` holds (a plugin's options)."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return draw(st.sampled_from(schema["enum"]))
    for key in ("oneOf", "anyOf"):
        if schema.get(key):  # the branch drawn, with what the node says beside it (properties, required)
            branch = draw(st.sampled_from(schema[key]))
            merged = {**{k: v for k, v in schema.items() if k != key}, **branch}
            merged["required"] = [*schema.get("required", []), *branch.get("required", [])]
            return draw(from_schema(merged, name, depth))
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = draw(st.sampled_from(kind))
    if kind == "object" or "properties" in schema:
        return _object_from(draw, schema, depth)
    if kind == "array":
        low = schema.get("minItems", 0)
        count = draw(st.integers(low, max(low, min(schema.get("maxItems", 3), 3))))
        return [draw(from_schema(schema.get("items", {}), name, depth + 1)) for _ in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        high = schema.get("maximum", schema.get("exclusiveMaximum", low + 10**6))
        if kind == "integer":
            return draw(st.integers(math.ceil(low), math.floor(high)))
        return draw(st.floats(low, high, allow_nan=False, exclude_min="exclusiveMinimum" in schema,
                              exclude_max="exclusiveMaximum" in schema))
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "string":
        if name in NAMED_STRINGS and draw(st.integers(0, 9)) > 0:
            return draw(st.sampled_from(NAMED_STRINGS[name]))
        if "pattern" in schema:
            return draw(st.from_regex(schema["pattern"], fullmatch=True).filter(lambda s: len(s) <= 100))
        return draw(WORDS)
    return draw(st.one_of(st.integers(0, 100), WORDS))


def _object_from(draw: st.DrawFn, schema: dict[str, Any], depth: int) -> dict[str, Any]:
    required = set(schema.get("required", []))
    drawn: dict[str, Any] = {}
    for key, sub in schema.get("properties", {}).items():
        if key in required or (depth < 4 and draw(st.booleans())):
            drawn[key] = draw(from_schema(sub, key, depth + 1))
    for branch in schema.get("allOf", []):
        condition = (branch.get("if") or {}).get("properties", {})
        if branch.get("then") and condition and all(drawn.get(key) == sub.get("const")
                                                    for key, sub in condition.items()):
            then = branch["then"]
            for key, sub in then.get("properties", {}).items():
                if key in then.get("required", []) or key in drawn or draw(st.booleans()):
                    drawn[key] = draw(from_schema(sub, key, depth + 1))
    return drawn


@functools.cache
def _composed_schema() -> dict[str, Any]:
    """The composed schema, read once and copied: the same for every example (hypothesis replays them), even
    if running kvbench in-process changed the one the loader holds."""
    from kvbench_core.runspec.spec_schema import full_schema

    return copy.deepcopy(full_schema())


@st.composite
def schema_specs(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """("valid", a spec the schema describes) or ("mutated", the same with one value replaced by junk)."""
    spec = draw(from_schema(_composed_schema()))
    if not draw(st.booleans()):
        return "valid", spec
    paths: list[JsonPath] = []
    stack: list[tuple[JsonPath, Any]] = [((), spec)]
    while stack:
        path, value = stack.pop()
        if path:
            paths.append(path)
        if isinstance(value, dict):
            stack.extend(((*path, key), item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend(((*path, index), item) for index, item in enumerate(value))
    if not paths:
        return "valid", spec
    return "mutated", set_at(spec, draw(st.sampled_from(paths)), draw(JUNK))


#: What an error line names first: a field (``cache.tiers[0].backend``), a file (``spec.yaml:3:1``), a model.
NAMED = re.compile(r"^kvbench: error: ([/A-Za-z_][\w.\[\]/-]*(:\d+)*:|model |tier |invalid spec:)")


def check_one_line_per_field(stderr: str, shown: str) -> None:
    """One line naming a field; or, for a drawn spec wrong in several fields at once, ``invalid spec:`` and one
    line per field, no field twice (its first failed rule only)."""
    lines = stderr.splitlines()
    if len(lines) == 1:
        assert NAMED.match(lines[0]), f"{shown}\n{stderr}"
        return
    assert lines[0] == "kvbench: error: invalid spec:", f"{shown}\n{stderr}"
    fields = [line.strip().partition(": ")[0] for line in lines[1:]]
    assert all(line.startswith("  ") and field for line, field in zip(lines[1:], fields, strict=True)), stderr
    assert len(set(fields)) == len(fields), f"a field reported twice:\n{stderr}"


def _drawn(sandbox: Path, kind: str, spec: dict[str, Any]) -> None:
    spec_path = sandbox / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    with mock.patch("kvbench_core.cli.run_cmd.run_session", _refuse_to_run):
        try:
            outcome = run_in_process(["run", str(spec_path), "--dry-run"])
        except Accepted:
            pytest.fail("--dry-run started a run")
    CASES[f"schema-drawn {kind}"] += 1
    shown = json.dumps(spec, default=str)[:600]
    assert "Traceback" not in outcome.stderr, f"{shown}\n{outcome.stderr}"
    if outcome.code == 0:
        assert outcome.stdout.strip() and "error:" not in outcome.stderr, f"{shown}\n{outcome}"
    else:
        assert outcome.code in (2, 3), f"{shown}\n{outcome}"  # 3: a plugin the drawn tier needs is missing here
        check_one_line_per_field(outcome.stderr, shown)
    assert tree(sandbox / "work") == [], f"{shown}: wrote {tree(sandbox / 'work')}"


@settings(max_examples=max(5, FUZZ_EXAMPLES // 4), **FUZZ_SETTINGS)
@given(drawn=schema_specs())
def test_a_spec_drawn_from_the_schema_is_a_plan_or_one_line_naming_a_field(sandbox: Path,
                                                                           drawn: tuple[str, dict[str, Any]]) -> None:
    _drawn(sandbox, *drawn)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@settings(max_examples=FUZZ_SLOW_EXAMPLES * 2, **FUZZ_SETTINGS)
@given(drawn=schema_specs())
def test_many_more_specs_drawn_from_the_schema(sandbox: Path, drawn: tuple[str, dict[str, Any]]) -> None:
    _drawn(sandbox, *drawn)


def test_a_wrong_list_is_one_line_naming_the_list(sandbox: Path) -> None:
    """``formats: ['', '']`` fails the list's uniqueness and each element's enum: one wrong value, one line
    naming the field (the fuzzer's find in a fresh-clone CI run: three lines)."""
    spec_path = sandbox / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(base_spec(FUZZ_ROOT), sort_keys=False))
    outcome = run_in_process(["run", str(spec_path), "--dry-run", "--set", "output.formats=['', '0']"])
    assert outcome.code == 2
    (line,) = outcome.stderr.splitlines()
    assert line.startswith("kvbench: error: output.formats"), line
