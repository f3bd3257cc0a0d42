"""One word per concept on the command line (docs/cli.md): ``--help`` shows only the new spellings, and
each old one still works for one release, printing exactly one line that names the new spelling.

The old spellings of ``kvbench score``, ``kvbench project`` and ``kvbench fio --source`` are tested beside
those commands (tests/kvio/test_kvio_validate.py, tests/kvio/test_kvio_projection.py,
tests/reports/test_fio_distiller.py), where their inputs are built."""

from __future__ import annotations

import re

import pytest

from kvbench_core.cli import main
from kvbench_core.cli.renamed import RENAMED_COMMANDS, renamed_command_line, take_notices


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--help"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def notices(err: str) -> list[str]:
    """The rename notices in a command's stderr."""
    return [line for line in err.splitlines() if re.fullmatch(r"kvbench: `[^`]+` is now `[^`]+`", line)]


def test_the_command_list_has_the_new_names_only(capsys: pytest.CaptureFixture[str]) -> None:
    listed = set(re.findall(r"^    (\w+)\s", _help(capsys), flags=re.MULTILINE))
    assert {"check", "score", "project", "spec", "plugins", "fio", "workload"} <= listed
    assert not listed & set(RENAMED_COMMANDS)


def test_an_unknown_command_is_refused_listing_the_new_names_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["nosuch"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "'score'" in err and "'project'" in err and not any(f"'{old}'" in err for old in RENAMED_COMMANDS)


@pytest.mark.parametrize(("argv", "new", "old"), [
    (["plugins"], ["--conformance BACKEND"], ["--check"]),
    (["score"], ["--projection MANIFEST", "--offsets", "--order", "--measured IO_LOG"],
     ["--plan", "--check-offsets", "--check-order"]),
    (["project"], ["usage: kvbench project", "--record MANIFEST"], ["kvbench plan"]),
    (["fio"], ["{auto,block-trace,counters}"], ["{auto,trace,record}", "{auto,block-trace,record}"]),
    (["replay"], ["--io-log IO_LOG", "`kvbench project --record`"], ["--io-log TRACE", "kvbench plan"]),
])
def test_a_commands_help_shows_the_new_spelling_only(argv: list[str], new: list[str], old: list[str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, *argv)
    assert all(spelling in text for spelling in new)
    assert not any(spelling in text for spelling in old)


def test_an_old_command_is_the_new_one_and_a_refused_line_gets_no_second_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A notice is printed only when the command succeeds (or folded into its one error line): argparse's
    refusal of the line names the new command in its usage instead."""
    assert "usage: kvbench score" in _help(capsys, "validate")
    with pytest.raises(SystemExit) as refused:
        main(["validate"])  # --plan/--semantic and --measured are required
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert notices(err) == [] and "usage: kvbench score" in err


def test_a_refused_old_command_is_one_line_with_the_notice_folded_in(
        capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert err == (f"kvbench: error: {tmp_path / 'missing.yaml'}: spec file not found (note: `validate SPEC` is "
                   "`spec validate SPEC`; `validate` alone, the kvio scorer, is now `score`)\n")
    assert main(["plugins", "--check", "no-such-backend"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("kvbench: error: ") and line.endswith(
        "(note: `plugins --check` is now `plugins --conformance`)")


def test_only_the_command_word_is_renamed() -> None:
    """``spec validate`` is the new spelling of validating a spec, and a file may be called ``validate`` or
    ``plan``."""
    assert renamed_command_line(["spec", "validate", "validate"]) == ["spec", "validate", "validate"]
    assert renamed_command_line(["score", "--projection", "validate"]) == ["score", "--projection", "validate"]
    assert renamed_command_line(["run", "plan", "--set", "name=plan"]) == ["run", "plan", "--set", "name=plan"]
    assert take_notices() == []
    assert renamed_command_line(["validate", "--projection", "validate"]) == ["score", "--projection", "validate"]
    assert take_notices() == ["`validate` is now `score`"]
    assert renamed_command_line(["plan", "--model", "plan"]) == ["project", "--model", "plan"]
    assert take_notices() == ["`plan` is now `project`"]


def test_the_new_conformance_flag_says_nothing_and_the_old_one_runs_the_same_checks(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--conformance", "cpu"]) == 0
    new = capsys.readouterr()
    assert notices(new.err) == []
    assert main(["plugins", "--check", "cpu"]) == 0
    old = capsys.readouterr()
    assert notices(old.err) == ["kvbench: `plugins --check` is now `plugins --conformance`"]
    assert len(_statuses(new.out)) == 10
    assert _statuses(old.out) == _statuses(new.out)  # details may differ: one says how much memory was free
    assert new.out.rstrip().endswith("cpu: 9 passed, 0 failed, 1 skipped")


def _statuses(out: str) -> list[tuple[str, str]]:
    """(status, check name) for each line a conformance run prints per check."""
    return re.findall(r"^(PASS|FAIL|SKIP)\s+(\w+)", out, flags=re.MULTILINE)


def test_validate_with_a_spec_file_is_spec_validate_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """The old ``validate`` (the kvio scorer) took no file: ``validate spec.yaml`` is a new user's guess at
    ``spec validate``, so it runs that, with one line naming it; with the scorer's inputs it is ``score``."""
    from pathlib import Path

    spec = str(Path(__file__).parent.parent.parent / "specs" / "quickstart.yaml")
    assert main(["validate", spec]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["kvbench: `validate SPEC` is `spec validate SPEC`; `validate` alone, "
                                         "the kvio scorer, is now `score`"]
    assert main(["spec", "validate", spec]) == 0
    assert capsys.readouterr().out == captured.out
    assert main(["validate", "--projection", "p.yaml", "--measured", "missing.jsonl"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("kvbench: error: ") and line.endswith("(note: `validate` is now `score`)")
    assert main(["validate", "--plan", "p.yaml", "--measured", "missing.jsonl"]) == 2  # both words old: one line
    (line,) = capsys.readouterr().err.splitlines()
    assert line == ("kvbench: error: missing.jsonl: no such I/O log (note: `validate` is now `score`; "
                    "`score --plan` is now `score --projection`)")
