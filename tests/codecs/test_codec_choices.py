"""A tier built outside a spec (``kvbench replay --tier``) takes a codec in every form a spec allows, and a
bad one is one line naming the field (R3 M2: a mapping crashed with KeyError 'options' or a TypeError)."""

from __future__ import annotations

import pytest

from kvbench_core.codecs.tier import CodecTier
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import SpecError
from kvbench_core.engine.run.factory import create_backend

pytest.importorskip("cramjam", reason="the codecs extra is not installed (pip install 'kvbench-core[codecs]')")


def tier_with(codec: object) -> dict[str, object]:
    return {"backend": "cpu", "codec": codec}


@pytest.mark.parametrize(("codec", "chunk", "segment"), [
    ("zstd", 1 << 20, 64 << 20),
    ({"name": "zstd"}, 1 << 20, 64 << 20),
    ({"name": "zstd", "chunk": "64KiB"}, 64 << 10, 64 << 20),
    ({"name": "zstd", "options": {"level": 3}, "chunk": 4096, "segment": "1MiB"}, 4096, 1 << 20),
])
def test_every_form_of_a_codec_choice_builds_the_stage(codec: object, chunk: int, segment: int) -> None:
    backend = create_backend(tier_with(codec), BackendContext(tier_name="t", run_id="r"), path="--tier")
    assert isinstance(backend, CodecTier)
    assert (backend.codec.name, backend.chunk_bytes, backend.segment_bytes) == ("zstd", chunk, segment)


@pytest.mark.parametrize("codec", [None, "none", {"name": "none"}])
def test_no_codec_is_no_stage(codec: object) -> None:
    backend = create_backend(tier_with(codec), BackendContext(tier_name="t", run_id="r"), path="--tier")
    assert not isinstance(backend, CodecTier)


@pytest.mark.parametrize(("codec", "message"), [
    ({"nam": "zstd"}, r"^--tier\.codec: expected a codec name"),
    ({"name": "zstd", "chunk": "lots"}, r"^--tier\.codec"),
    ({"name": "zstd", "chunk": 3}, r"^--tier\.codec\.segment: must be a multiple of chunk"),
    ({"name": "zstd", "options": {"level": "high"}}, r"^--tier\.codec\.options"),
    ({"name": "nosuch"}, r"--tier\.codec\.name"),
])
def test_a_bad_codec_choice_is_one_line_naming_the_field(codec: object, message: str) -> None:
    with pytest.raises(SpecError, match=message) as caught:
        create_backend(tier_with(codec), BackendContext(tier_name="t", run_id="r"), path="--tier")
    assert "\n" not in str(caught.value)
