"""A tiny, fast run spec for tests of whole runs (sessions, trials, clients, MPI, reports).

Entries of 16-64 tokens of llama3.2-1b (0.5-2 MiB), a small DRAM tier in front
of a directory tier without fsync, so a 1-2 s run moves a few hundred MiB on
two shared cores and still exercises reads, writes, demotion and both tiers.
"""

from __future__ import annotations

import contextlib
import io
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from kvbench_core.cli import main


def history_spec(tiers: list[dict[str, Any]], *, users: int = 2, **top: Any) -> dict[str, Any]:
    """20 requests of small tiny-1b chatbot users that also read history (two-turn conversations, shared
    prefixes), behind a 1 MiB DRAM tier and ``tiers``: every kind of read and write in a second.  20: a p95
    needs that many for "completed" (kvbench_core/results/status.py); fewer end inconclusive, exit 7.
    ``top`` sets or replaces top-level fields (name, seed, output, …)."""
    spec: dict[str, Any] = {
        "version": 1, "name": "history", "seed": 1,
        "model": {"name": "tiny-1b"},
        "requests": 20,
        "workload": {"users": users, "max_inflight": 2, "generation": "none", "options": {
            "profiles": {"chatbot": {"context": [16, 48], "generate": [1, 64], "think_s": [0, 0]}},
            "profile_mix": {"chatbot": 1}, "multi_turn": {"max_turns": 2, "turn_tokens": [4, 16]},
            "prefix_caching": {"prefix_tokens": [4, 16]}}},
        "cache": {"tiers": [{"name": "dram", "backend": "cpu", "capacity": "1MiB"}, *tiers]},
    }
    spec.update(top)
    return spec


def tiny_spec(tmp_path: Path, **overrides: Any) -> Path:
    """Write the spec under ``tmp_path`` (cache in ``tmp_path/cache``, results in ``tmp_path/out``)."""
    spec: dict[str, Any] = {
        "version": 1, "name": "tiny", "seed": 42,
        "model": {"name": "llama3.2-1b", "dtype": "bf16"},
        "duration": "1500ms",
        "workload": {
            "users": 3, "max_inflight": 2, "generation": "none",
            "options": {"profiles": {"tiny": {"context": [16, 64], "generate": [4, 16], "think_s": [0.01, 0.05]}},
                        "profile_mix": {"tiny": 1}, "prefix_caching": {"prefix_tokens": [8, 32]},
                        "multi_turn": {"turn_tokens": [8, 32]}},
        },
        "cache": {"tiers": [
            {"name": "dram", "backend": "cpu", "capacity": "8MiB"},
            {"name": "nvme", "backend": "nvme", "capacity": "64MiB",
             "options": {"path": str(tmp_path / "cache"), "fsync": False, "drop_cache": False}},
        ]},
        "output": {"directory": str(tmp_path / "out"), "interval": 0.5, "progress": "off"},
    }
    for key, value in overrides.items():
        # A dict override merges one level deep: workload={"users": 5} keeps the tiny profiles (replacing
        # them brought back the default 25K-token contexts, entries no 64 MiB tier can hold).
        spec[key] = {**spec[key], **value} if isinstance(value, dict) and isinstance(spec.get(key), dict) else value
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def result_validator() -> Any:
    """A JSON Schema validator for result documents (kvbench_core/schemas/result.schema.json)."""
    import jsonschema

    schema = json.loads((files("kvbench_core") / "schemas/result.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def assert_valid_result(result: dict[str, Any]) -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in result_validator().iter_errors(result)]
    assert not errors, "\n".join(errors[:10])


def run_cli(root: Path, spec: dict[str, Any], *extra: str) -> tuple[int, str, str]:
    """``kvbench run --quiet [extra]`` in-process on ``spec`` (written to ``root/spec.yaml``): (exit code,
    stdout, stderr); a user error never ends in a traceback."""
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", str(path), "--quiet", *extra])
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue(), err.getvalue()
