"""A tier's directory is its backend class's ``directory_option``, whatever the option is called (issue #30 §2):
a vendor tier whose directory option is ``root`` is expanded, made safe (refused system paths, missing
parents, overlaps) and reported in the result's ``environment.paths`` exactly as a ``path`` is."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

import pytest
from conftest import small_spec
from testkit import registered

from kvbench_core.cli import main
from kvbench_core.contracts.pieces import PieceBackend
from kvbench_core.contracts.plugins import hookimpl


class RootedFiles(PieceBackend):
    """One file per entry under ``<root>/<run id>``: a vendor tier whose directory option is not "path"."""

    name = "rooted-files"
    directory_option = "root"
    transfer_size = 64 << 10
    options_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False,
                                                "required": ["root"],
                                                "properties": {"root": {"type": "string", "minLength": 1}}}

    def open(self) -> None:
        self.directory = Path(self.options["root"]) / self.context.run_id
        self.directory.mkdir(parents=True)

    def _file(self, key: str) -> Path:
        return self.directory / key.replace("/", "_")

    def begin_write(self, key: str, size: int) -> BinaryIO:
        return open(self._file(key), "wb")  # the kit's end_write or abort_write closes it

    def store_piece(self, handle: BinaryIO, offset: int, data: memoryview) -> None:
        os.pwrite(handle.fileno(), data, offset)

    def end_write(self, handle: BinaryIO) -> None:
        handle.close()

    def abort_write(self, handle: BinaryIO) -> None:
        handle.close()
        Path(handle.name).unlink(missing_ok=True)

    def load_piece(self, key: str, offset: int, out: memoryview) -> None:
        with open(self._file(key), "rb") as handle:
            handle.seek(offset)
            handle.readinto(out)

    def delete(self, key: str) -> None:
        self._file(key).unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)  # the run's own subdirectory, which open made


class _Plugin:
    @hookimpl
    def kvbench_storage_backends(self) -> dict[str, type]:
        return {RootedFiles.name: RootedFiles}


@pytest.fixture(autouse=True)
def rooted_files() -> Iterator[None]:
    with registered(_Plugin(), "test-rooted-files"):
        yield


def rooted_spec(out: Path, *roots: str) -> dict[str, Any]:
    tiers = [{"name": "dram", "backend": "cpu", "capacity": "1MiB"}]
    tiers += [{"name": f"files{i}", "backend": "rooted-files", "capacity": "64MiB", "options": {"root": root}}
              for i, root in enumerate(roots)]
    return small_spec(requests=6, cache={"tiers": tiers}, output={"directory": str(out), "progress": "off"})


@pytest.mark.parametrize(("roots", "said"), [
    (("/etc",), "kvbench: error: cache.tiers[1].options.root: /etc "),
    (("{tmp}/missing/kv",), "kvbench: error: cache.tiers[1].options.root: {tmp}/missing/kv: its parent "
                            "{tmp}/missing does not exist"),
    (("{tmp}/kv", "{tmp}/kv/inner"), "kvbench: error: "),
])
def test_a_directory_option_not_named_path_is_made_safe(tmp_path: Path, write_spec: Any, roots: tuple[str, ...],
                                                       said: str, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "kv").mkdir()
    spec = write_spec(rooted_spec(tmp_path / "out", *(root.format(tmp=tmp_path) for root in roots)))
    assert main(["run", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(said.format(tmp=tmp_path)) and err.count("\n") == 1, err
    if len(roots) == 2:  # the overlap names both tiers' fields
        assert "cache.tiers[1].options.root" in err and "cache.tiers[2].options.root" in err, err


def test_a_directory_option_not_named_path_is_expanded_and_reported(
        tmp_path: Path, write_spec: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kv").mkdir()
    monkeypatch.setenv("KVBENCH_TEST_ROOT", str(tmp_path))
    spec = write_spec(rooted_spec(tmp_path / "out", "$KVBENCH_TEST_ROOT/kv"))
    assert main(["run", str(spec), "--quiet", "--exit-zero"]) == 0  # inconclusive: 6 requests, no p95
    (result,) = (tmp_path / "out").glob("*.json")
    document = json.loads(result.read_text())
    assert document["environment"]["paths"]["files0"]["path"] == str(tmp_path / "kv")
    assert document["metrics"]["tiers"]["files0"]["write"]["ops"] > 0
