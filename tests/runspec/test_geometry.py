"""KV geometry: bytes per token for every catalog model and every shared config, TP sharding, CLA, dtypes,
and the errors a malformed config must give."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvbench_core.cli import main
from kvbench_core.contracts.errors import InputFileError, SpecError
from kvbench_core.runspec.geometry import (
    DTYPE_BYTES,
    catalog,
    catalog_model,
    geometry_from_config,
    normalize_dtype,
    resolve_model,
)

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = next((p for p in (REPO / "shared" / "data", REPO.parent / "shared" / "data") if p.is_dir()), None)
needs_shared = pytest.mark.skipif(SHARED_DATA is None, reason="shared/data (real model configs) not present")

# Seed §4.2 for the MLPerf names, except qwen3-32b: its real config has head_dim 128 (not hidden/heads = 80),
# so 262,144 rather than the seed's 163,840.  The rest follow the LMCache calculator's entries.
EXPECTED_BF16 = {
    "tiny-1b": 24_576, "mistral-7b": 131_072, "llama2-7b": 524_288, "llama3.1-8b": 131_072,
    "llama3.1-70b-instruct": 327_680, "deepseek-v3": 70_272, "qwen3-32b": 262_144, "gpt-oss-120b": 73_728,
    "gpt-oss-20b": 49_152, "llama3.2-1b": 32_768, "llama3.2-3b": 114_688, "qwen3-8b": 147_456,
    "qwen3-14b": 163_840, "llama3.1-405b": 516_096, "deepseek-r1": 70_272, "qwen3-0.6b": 114_688,
    "qwen3-4b": 147_456, "qwen2.5-0.5b": 12_288, "qwen2.5-3b-instruct": 36_864, "qwen2.5-7b-instruct": 57_344,
    "qwen-7b": 524_288, "mistral-large-2407": 360_448, "longchat-7b-16k": 524_288, "l3-8b-lunaris": 131_072,
    "glm-4.5": 376_832, "glm-4.6": 376_832,
}


def _provenance_rows() -> dict[str, int]:
    """``file -> KV B/token`` from the table in shared/data/PROVENANCE.md (the reviewed source of truth)."""
    rows = {}
    for line in (SHARED_DATA / "PROVENANCE.md").read_text().splitlines():
        match = re.match(r"\|\s*([\w.-]+\.json)\s*\|(?:[^|]*\|){4}\s*(\d+)\s*\|", line)
        if match:
            rows[match.group(1)] = int(match.group(2))
    return rows


def test_every_catalog_model_has_the_expected_bytes_per_token():
    assert set(catalog()) == set(EXPECTED_BF16)
    for name, expected in EXPECTED_BF16.items():
        assert catalog()[name].bytes_per_token("bf16") == expected, name


def test_seed_models_are_all_in_the_catalog_with_their_families():
    families = {name: catalog()[name].family for name in EXPECTED_BF16}
    assert families["llama2-7b"] == "MHA"
    assert families["llama3.1-8b"] == "GQA"
    assert families["deepseek-v3"] == "MLA"
    assert families["qwen3-32b"] == "GQA-head_dim"
    assert families["gpt-oss-20b"] == "GQA-head_dim"


@needs_shared
def test_every_shared_hf_config_loads_with_the_provenance_bytes_per_token():
    expected = _provenance_rows()
    files = sorted((SHARED_DATA / "model_configs").glob("*.json"))
    assert {f.name for f in files} == set(expected)
    for path in files:
        assert resolve_model(str(path), "bf16").bytes_per_token == expected[path.name], path.name


@needs_shared
def test_shared_configs_agree_with_their_catalog_entries():
    for file_name, catalog_name in [("Qwen3-32B.json", "qwen3-32b"), ("DeepSeek-V3.json", "deepseek-v3"),
                                    ("gpt-oss-120b.json", "gpt-oss-120b"), ("Llama-3.2-1B.json", "llama3.2-1b")]:
        from_file = resolve_model(str(SHARED_DATA / "model_configs" / file_name)).geometry
        from_catalog = catalog()[catalog_name]
        assert (from_file.family, from_file.kv_layers, from_file.head_dim, from_file.default_dtype) == (
            from_catalog.family, from_catalog.kv_layers, from_catalog.head_dim, from_catalog.default_dtype)


@needs_shared
def test_every_lmcache_calculator_entry_loads_and_matches_the_catalog():
    path = SHARED_DATA / "lmcache_kv_calculator_modelconfig.json"
    for hf_id in json.loads(path.read_text()):
        from_file = resolve_model(hf_id, config=str(path))
        assert from_file.geometry.name == hf_id
        assert from_file.bytes_per_token == resolve_model(hf_id).bytes_per_token, hf_id


def test_dtype_sizes_and_torch_spellings():
    llama = catalog_model("llama3.1-8b")
    assert {d: llama.bytes_per_token(d) for d in DTYPE_BYTES} == {
        "fp32": 262_144, "fp16": 131_072, "bf16": 131_072, "fp8": 65_536, "int8": 65_536}
    assert normalize_dtype("torch.bfloat16") == "bf16"
    assert normalize_dtype("float8_e4m3fn") == "fp8"
    with pytest.raises(SpecError, match="unknown KV dtype 'fp4'"):
        normalize_dtype("fp4")


def test_default_dtype_comes_from_torch_dtype_else_bf16():
    assert resolve_model("tiny-1b").dtype == "fp16"  # MLPerf sizes its models in float16
    assert resolve_model("gpt-oss-20b").dtype == "bf16"  # its config has no torch_dtype
    assert resolve_model("gpt-oss-20b", "fp8").bytes_per_token == 24_576
    fp32 = geometry_from_config({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256,
                                 "torch_dtype": "float32"}, name="x", where="x.json")
    assert fp32.default_dtype == "fp32"
    assert fp32.family == "MHA"  # no num_key_value_heads: HF's convention is kv_heads = heads


def test_gqa_shards_heads_across_ranks():
    model = resolve_model("llama3.1-70b-instruct", "bf16", tp=4)
    assert model.geometry.kv_heads_per_rank(4) == 2
    assert model.bytes_per_token == 81_920
    assert model.kv_bytes(256) == 20 << 20  # the seed's four 20 MiB per-rank objects of an 80 MiB chunk
    assert model.bytes_per_token_all_ranks == 327_680


def test_gqa_with_fewer_kv_heads_than_ranks_replicates_one_head_per_rank():
    model = resolve_model("qwen2.5-3b-instruct", "bf16", tp=4)  # 2 KV heads, 16 query heads
    assert model.geometry.kv_heads_per_rank(4) == 1
    assert model.bytes_per_token == 36 * 2 * 1 * 128 * 2
    assert model.bytes_per_token_all_ranks == 4 * model.bytes_per_token  # replicas are stored on each rank


def test_mla_latent_is_replicated_on_every_rank():
    single, sharded = resolve_model("deepseek-v3", tp=1), resolve_model("deepseek-v3", tp=8)
    assert sharded.bytes_per_token == single.bytes_per_token == 70_272
    assert sharded.bytes_per_token_all_ranks == 8 * 70_272


@pytest.mark.parametrize(("model", "tp", "message"), [
    ("llama3.1-8b", 3, "tp=3 does not divide its 8 KV heads"),
    ("qwen2.5-7b-instruct", 6, "cannot be replicated evenly"),
    ("llama3.1-8b", 0, "tp must be >= 1"),
    ("deepseek-v3", 0, "tp must be >= 1"),
    # 8 KV heads replicate evenly 128 ways, but 32 query heads cannot be split 128 ways (issue #29)
    ("llama3.2-1b", 128, "tp=128 does not divide its 32 attention heads"),
    ("deepseek-v3", 256, "tp=256 does not divide its 128 attention heads"),
])
def test_impossible_tp_is_a_clear_error(model, tp, message):
    with pytest.raises(SpecError, match=message):
        resolve_model(model, tp=tp)


def test_cla_shares_kv_across_layer_groups():
    config = {"num_hidden_layers": 63, "hidden_size": 6400, "num_attention_heads": 80, "num_key_value_heads": 8,
              "head_dim": 128, "use_cla": True, "cla_share_factor": 2}
    geometry = geometry_from_config(config, name="cla-test", where="test")
    assert geometry.family == "CLA"
    assert geometry.kv_layers == 32  # ceil(63 / 2)
    assert geometry.bytes_per_token("bf16") == 32 * 2 * 8 * 128 * 2
    assert geometry_from_config({**config, "use_cla": False}, name="x", where="test").kv_layers == 63


def test_multimodal_text_config_is_used():
    config = {"model_type": "vlm", "text_config": {"num_hidden_layers": 4, "hidden_size": 512,
                                                   "num_attention_heads": 8, "num_key_value_heads": 2}}
    assert geometry_from_config(config, name="vlm", where="t").bytes_per_token("bf16") == 4 * 2 * 2 * 64 * 2
    with pytest.raises(InputFileError, match="t: text_config: field 'hidden_size' is missing"):
        geometry_from_config({"text_config": {"num_hidden_layers": 4, "num_attention_heads": 8}}, name="v", where="t")


def test_names_and_hf_ids_resolve_case_insensitively():
    assert resolve_model("meta-llama/Llama-3.1-8B-Instruct").geometry.name == "llama3.1-8b"
    assert resolve_model("LLAMA3.1-70B", tp=8).bytes_per_token == 40_960
    with pytest.raises(SpecError, match=re.escape("did you mean llama3.1-8b")):
        resolve_model("llama3.1-8")


def _write(tmp_path: Path, name: str, content: object) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_config_path_and_model_directory_load(tmp_path):
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2}
    (tmp_path / "m").mkdir()
    _write(tmp_path / "m", "config.json", config)
    assert resolve_model(str(tmp_path / "m")).bytes_per_token == 2 * 2 * 2 * 16 * 2
    assert resolve_model("my-label", config=_write(tmp_path, "c.json", config)).geometry.name == "my-label"


@pytest.mark.parametrize(("content", "message"), [
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}, "field 'num_hidden_layers' is missing"),
    ({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": "4"},
     "field 'num_attention_heads' must be an integer >= 1, got '4'"),
    ({"num_hidden_layers": 2, "hidden_size": 60, "num_attention_heads": 8}, "field 'head_dim' is missing"),
    ({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "kv_lora_rank": 512},
     "field 'qk_rope_head_dim' is missing"),
    ({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "torch_dtype": "int4"},
     "field 'torch_dtype' is not a KV dtype"),
    ("{\n  \"num_hidden_layers\": 2,\n", "line 3: invalid JSON"),
    ([1, 2], "expected a JSON object, got list"),
    ({"a": 1}, "field 'num_hidden_layers' is missing"),
])
def test_malformed_config_names_the_file_and_field(tmp_path, content, message):
    path = _write(tmp_path, "config.json", content)
    with pytest.raises(InputFileError, match=re.escape(message)) as error:
        resolve_model(path)
    assert path in str(error.value)


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(InputFileError, match="no such model config file"):
        resolve_model(str(tmp_path / "nope.json"))


def test_multi_model_file_needs_a_known_entry(tmp_path):
    entries = {"org/a": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}}
    path = _write(tmp_path, "modelconfig.json", entries)
    with pytest.raises(InputFileError, match="holds 1 models; name one of: org/a"):
        resolve_model(path)
    with pytest.raises(InputFileError, match="no model 'org/b'"):
        resolve_model("org/b", config=path)
    assert resolve_model("ORG/A", config=path).geometry.name == "org/a"


def test_cli_lists_the_catalog_as_json(capsys):
    assert main(["models", "--json", "--dtype", "fp8"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["llama3.1-8b"]["bytes_per_token"] == 65_536
    assert rows["deepseek-v3"]["head_dim"] is None


def test_cli_show_sizes_per_rank_and_in_total(capsys):
    assert main(["models", "show", "llama3.1-70b", "--tp", "4", "--tokens", "256,8192", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["kv_heads_per_rank"] == 2
    assert data["sizes"][0] == {"tokens": 256, "bytes_per_rank": 20 << 20, "bytes_all_ranks": 80 << 20}
    assert main(["models", "show", "deepseek-v3", "--tokens", "1024"]) == 0
    text = capsys.readouterr().out
    assert "kv_lora_rank" in text and "68.62 MiB" in text


def test_cli_errors_are_one_line(capsys):
    assert main(["models", "show", "llama3.1-8b", "--tp", "3"]) == 2
    assert "does not divide its 8 KV heads" in capsys.readouterr().err
    assert main(["models", "show", "llama3.1-8b", "--tokens", "1k"]) == 2
    assert "--tokens" in capsys.readouterr().err


def test_project_refuses_a_tp_the_attention_heads_cannot_split_as_run_does(capsys, tmp_path):
    """``project --tp 128`` (``plan`` then) on a 32-query-head model printed ``kv_heads_per_rank 8`` (issue #29);
    now it is the same one-line refusal the run's spec gives."""
    assert main(["project", "--model", "llama3.2-1b", "--tp", "128", "--tokens", "1024"]) == 2
    assert capsys.readouterr().err == ("kvbench: error: model 'llama3.2-1b': tp=128 does not divide its 32 "
                                       "attention heads; use a tp that divides 32\n")
    assert main(["project", "--model", "llama3.2-1b", "--tp", "32", "--tokens", "1024"]) == 0
    capsys.readouterr()
    spec = Path(__file__).parent.parent.parent / "specs" / "quickstart.yaml"
    assert main(["run", str(spec), "--dry-run", "--set", "model.name=llama3.2-1b", "--set", "model.tp=128"]) == 2
    assert "model.tp: model 'llama3.2-1b': tp=128 does not divide its 32 attention heads" in capsys.readouterr().err
