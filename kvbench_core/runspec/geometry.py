"""KV-cache geometry of a model: how many bytes one token's keys and values occupy, per TP rank.

Everything kvbench sizes (cache entries, kvio objects, capacity plans) starts
from ``bytes_per_token``, so the formulas live here once, in the shape the
LMCache KV-cache calculator and the MLPerf KV-cache spec (§4.2) use:

- MHA / GQA: ``kv_layers × 2 × kv_heads × head_dim × dtype_bytes`` where
  ``head_dim`` is the config's ``head_dim`` when present (Qwen3, gpt-oss),
  else ``hidden_size / num_attention_heads``.
- MLA (DeepSeek): ``layers × (kv_lora_rank + qk_rope_head_dim) × dtype_bytes``;
  K and V share one latent, so there is no ×2.
- CLA (Hunyuan cross-layer attention): layers share KV in groups of
  ``cla_share_factor``, so ``kv_layers = ceil(layers / cla_share_factor)``.

Tensor parallelism follows vLLM: with ``kv_heads >= tp`` each rank holds
``kv_heads / tp`` heads (``tp`` must divide ``kv_heads``); with fewer KV heads
than ranks every rank holds one replicated head (``kv_heads`` must divide
``tp``); an MLA latent is replicated whole on every rank.  Sizes here are per
rank because that is what one rank's connector writes as one object.

Models come from the packaged catalog (``models_catalog.json``), from any
Hugging Face ``config.json``, or from an entry of the LMCache calculator's
multi-model ``modelconfig.json``.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from kvbench_core.contracts.errors import InputFileError, SpecError
from kvbench_core.runspec.jsonfile import json_line, read_json_text

#: Bytes per element of each KV-cache dtype kvbench sizes.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}

# torch / Hugging Face spellings, so a config's ``torch_dtype`` maps onto DTYPE_BYTES.
_DTYPE_ALIASES = {
    "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
    "float8": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
}

#: The dtype assumed when neither the user nor the config names one (what vLLM serves by default).
DEFAULT_DTYPE = "bf16"

CATALOG_FILE = "models_catalog.json"


def normalize_dtype(value: str) -> str:
    """The canonical dtype name (``bf16``…) for a canonical name or a torch spelling (``bfloat16``)."""
    name = value.strip().lower().removeprefix("torch.")
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise SpecError(f"unknown KV dtype {value!r}; expected one of {', '.join(DTYPE_BYTES)}")
    return name


@dataclass(frozen=True)
class ModelGeometry:
    """The attention shape that determines KV-cache size; ``head_dim`` is None for MLA models."""

    name: str
    layers: int
    kv_heads: int
    head_dim: int | None
    attention_heads: int
    hidden_size: int
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    cla_share_factor: int = 1
    default_dtype: str = DEFAULT_DTYPE
    source: str = ""

    @property
    def family(self) -> str:
        """MLA, CLA, MHA, GQA, or GQA-head_dim when ``head_dim`` is not hidden/heads (Qwen3-32B, gpt-oss),
        the case where the textbook formula gives the wrong size."""
        if self.kv_lora_rank:
            return "MLA"
        if self.cla_share_factor > 1:
            return "CLA"
        if self.kv_heads == self.attention_heads:
            return "MHA"
        if self.hidden_size % self.attention_heads or self.head_dim != self.hidden_size // self.attention_heads:
            return "GQA-head_dim"
        return "GQA"

    @property
    def kv_layers(self) -> int:
        """Layers that keep their own KV (CLA groups share one)."""
        return math.ceil(self.layers / self.cla_share_factor)

    def _check_tp(self, tp: int) -> None:
        if tp < 1:
            raise SpecError(f"model {self.name!r}: tp must be >= 1, got {tp}")

    def _check_query_split(self, tp: int) -> None:
        """Tensor parallelism splits the query heads across the ranks, whatever the KV heads (or an MLA latent)
        then do: vLLM refuses a ``tp`` that does not divide ``num_attention_heads``, and so does kvbench, in
        ``run`` and ``plan`` alike.  Checked after the KV-head rules, whose messages say more."""
        if self.attention_heads % tp:
            raise SpecError(f"model {self.name!r}: tp={tp} does not divide its {self.attention_heads} attention "
                            f"heads; use a tp that divides {self.attention_heads}")

    def kv_heads_per_rank(self, tp: int = 1) -> int:
        """KV heads one rank holds at tensor-parallel degree ``tp`` (vLLM's sharding rule)."""
        self._check_tp(tp)
        if self.kv_heads >= tp:
            if self.kv_heads % tp:
                raise SpecError(
                    f"model {self.name!r}: tp={tp} does not divide its {self.kv_heads} KV heads; "
                    f"use a tp that divides {self.kv_heads}"
                )
            self._check_query_split(tp)
            return self.kv_heads // tp
        if tp % self.kv_heads:
            raise SpecError(
                f"model {self.name!r}: with {self.kv_heads} KV heads and tp={tp} the heads cannot be "
                f"replicated evenly; use a tp that is a multiple of {self.kv_heads}"
            )
        self._check_query_split(tp)
        return 1

    def bytes_per_token(self, dtype: str | None = None, tp: int = 1) -> int:
        """KV bytes one token occupies on one rank."""
        element = DTYPE_BYTES[normalize_dtype(dtype or self.default_dtype)]
        if self.kv_lora_rank:
            self._check_tp(tp)  # the latent is replicated whole on every rank
            self._check_query_split(tp)
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * element
        assert self.head_dim is not None  # only MLA geometries lack a head_dim
        return self.kv_layers * 2 * self.kv_heads_per_rank(tp) * self.head_dim * element

    def kv_bytes(self, tokens: int, dtype: str | None = None, tp: int = 1) -> int:
        """KV bytes of ``tokens`` tokens on one rank."""
        return tokens * self.bytes_per_token(dtype, tp)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "family": self.family, "layers": self.layers, "kv_layers": self.kv_layers,
            "kv_heads": self.kv_heads, "head_dim": self.head_dim, "attention_heads": self.attention_heads,
            "hidden_size": self.hidden_size, "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim, "cla_share_factor": self.cla_share_factor,
            "default_dtype": self.default_dtype, "source": self.source,
        }


@dataclass(frozen=True)
class ResolvedModel:
    """A geometry bound to the dtype and TP degree of one run; sizes are per rank."""

    geometry: ModelGeometry
    dtype: str
    tp: int

    @property
    def bytes_per_token(self) -> int:
        return self.geometry.bytes_per_token(self.dtype, self.tp)

    @property
    def bytes_per_token_all_ranks(self) -> int:
        """What the whole TP group stores per token, counting replicated heads once per rank."""
        return self.bytes_per_token * self.tp

    def kv_bytes(self, tokens: int) -> int:
        return tokens * self.bytes_per_token

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.geometry.to_dict(), "dtype": self.dtype, "tp": self.tp,
            "kv_heads_per_rank": None if self.geometry.kv_lora_rank else self.geometry.kv_heads_per_rank(self.tp),
            "bytes_per_token": self.bytes_per_token, "bytes_per_token_all_ranks": self.bytes_per_token_all_ranks,
        }


#: Where a config field lies in its file: ``locate(("text_config", "head_dim"))`` -> ``"config.json:12"``.
Locate = Callable[[tuple[str, ...]], "str | None"]


def _positive_int(config: Mapping[str, Any], field: str, where: str | Callable[[str], str], *,
                  default: int | None = None) -> int:
    value = config.get(field)
    if value is None:
        if default is not None:
            return default
        raise InputFileError(f"{where(field) if callable(where) else where}: field '{field}' is missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputFileError(f"{where(field) if callable(where) else where}: field '{field}' must be an integer "
                             f">= 1, got {value!r}")
    return value


def geometry_from_config(config: Mapping[str, Any], *, name: str, where: str, source: str = "",
                         locate: Locate | None = None) -> ModelGeometry:
    """Geometry from Hugging Face ``config.json`` fields; errors name ``where`` (with ``locate``: the file
    and line of the offending field) and the field.

    Multimodal configs keep the language model under ``text_config``; its KV is what gets offloaded.
    """
    base: tuple[str, ...] = ()
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), Mapping):
        config, where, base = config["text_config"], f"{where}: text_config", ("text_config",)
    source = source or where

    def at(field: str) -> str:
        """``where``, or better the file and line of ``field`` when it is present."""
        found = locate((*base, field)) if locate is not None and field in config else None
        return found or where

    layers = _positive_int(config, "num_hidden_layers", at)
    heads = _positive_int(config, "num_attention_heads", at)
    hidden = _positive_int(config, "hidden_size", at)
    # HF convention: a config without num_key_value_heads is plain multi-head attention.
    kv_heads = _positive_int(config, "num_key_value_heads", at, default=heads)
    kv_lora_rank = qk_rope = 0
    head_dim: int | None = None
    if config.get("kv_lora_rank") is not None:
        kv_lora_rank = _positive_int(config, "kv_lora_rank", at)
        qk_rope = _positive_int(config, "qk_rope_head_dim", at)
    elif config.get("head_dim") is not None:
        head_dim = _positive_int(config, "head_dim", at)
    elif hidden % heads:
        raise InputFileError(
            f"{at('hidden_size')}: field 'head_dim' is missing and hidden_size {hidden} is not a multiple of "
            f"num_attention_heads {heads}, so it cannot be derived"
        )
    else:
        head_dim = hidden // heads
    cla = _positive_int(config, "cla_share_factor", at, default=1) if config.get("use_cla", True) else 1
    torch_dtype = config.get("torch_dtype") or config.get("dtype")
    try:
        default_dtype = normalize_dtype(torch_dtype) if isinstance(torch_dtype, str) else DEFAULT_DTYPE
    except SpecError:
        field = "torch_dtype" if config.get("torch_dtype") else "dtype"
        raise InputFileError(f"{at(field)}: field '{field}' is not a KV dtype kvbench knows: {torch_dtype!r}"
                             ) from None
    return ModelGeometry(
        name=name, layers=layers, kv_heads=kv_heads, head_dim=head_dim, attention_heads=heads,
        hidden_size=hidden, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope, cla_share_factor=cla,
        default_dtype=default_dtype, source=source,
    )


@cache
def _catalog() -> dict[str, dict[str, Any]]:
    text = resources.files("kvbench_core.runspec").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    return json.loads(text)["models"]


@cache
def catalog() -> dict[str, ModelGeometry]:
    """Every packaged model, by kvbench name, in catalog order."""
    return {
        name: geometry_from_config(entry["config"], name=name, where=f"{CATALOG_FILE}: models.{name}.config",
                                   source=entry["source"])
        for name, entry in _catalog().items()
    }


def catalog_model(name: str) -> ModelGeometry:
    """A catalog model by kvbench name or Hugging Face id (case-insensitive)."""
    wanted = name.strip().lower()
    for key, entry in _catalog().items():
        if wanted == key or wanted in (alias.lower() for alias in entry["aliases"]):
            return catalog()[key]
    close = difflib.get_close_matches(wanted, list(_catalog()), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; `kvbench models` lists them"
    raise SpecError(f"model {name!r} is not in the catalog and is not a config file{hint}")


def _is_single_config(data: Mapping[str, Any]) -> bool:
    return any(field in data for field in ("num_hidden_layers", "text_config", "model_type", "architectures"))


#: The largest model config file read: a Hugging Face config.json is a few KiB and the LMCache calculator's
#: multi-model file 4 KiB; 1 MiB is far above both and still instant to parse.
MAX_CONFIG_BYTES = 1 << 20


def load_config_file(path: str, model: str | None = None) -> ModelGeometry:
    """Geometry from a Hugging Face ``config.json`` (or a model directory holding one), or from one
    entry, chosen by ``model``, of a multi-model file such as the LMCache calculator's ``modelconfig.json``."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    data, text = read_json_text(path, "model config", max_bytes=MAX_CONFIG_BYTES)
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: expected a JSON object, got {type(data).__name__}")

    def locate(within: tuple[str | int, ...], label: str = "") -> str | None:
        line = json_line(text, within)
        return f"{path}:{line}{label}" if line else None

    if _is_single_config(data):
        label = model or data.get("_name_or_path") or os.path.splitext(os.path.basename(path))[0]
        return geometry_from_config(data, name=label, where=path, locate=locate)
    if not data or not all(isinstance(entry, dict) for entry in data.values()):
        raise InputFileError(f"{path}: field 'num_hidden_layers' is missing (not a model config)")
    if model is None:
        raise InputFileError(f"{path}: holds {len(data)} models; name one of: {', '.join(data)}")
    matches = [key for key in data if key.lower() == model.lower()]
    if not matches:
        raise InputFileError(f"{path}: no model {model!r}; it holds: {', '.join(data)}")
    key = matches[0]
    return geometry_from_config(data[key], name=key, where=f"{path}: {key}",
                                locate=lambda within: locate((key, *within), f": {key}"))


def resolve_model(name_or_path: str, dtype: str | None = None, tp: int = 1, *,
                  config: str | None = None) -> ResolvedModel:
    """The run's model: a catalog name or HF id, or a config file/directory path.

    A run spec's ``model: {name, config, dtype, tp}`` maps onto
    ``resolve_model(name, dtype, tp, config=config)``: with ``config`` the file
    supplies the geometry and ``name`` labels it (or picks the entry of a
    multi-model file).  The dtype defaults to the config's ``torch_dtype``, else
    bf16.  An impossible TP degree fails here, before any byte is written.
    """
    if config is not None:
        geometry = load_config_file(config, model=name_or_path or None)
    elif name_or_path.endswith(".json") or os.path.exists(name_or_path):
        geometry = load_config_file(name_or_path)
    else:
        geometry = catalog_model(name_or_path)
    resolved = ResolvedModel(geometry, normalize_dtype(dtype or geometry.default_dtype), tp)
    _ = resolved.bytes_per_token  # validates tp against the KV heads now, not mid-run
    return resolved
