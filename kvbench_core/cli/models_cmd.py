"""``kvbench models``: the model catalog, and one model's KV geometry and sizes (``models show``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from kvbench_core.cli.console import console
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.units import format_bytes
from kvbench_core.runspec.geometry import DTYPE_BYTES, ResolvedModel, catalog, normalize_dtype, resolve_model

DEFAULT_TOKENS = "1024,8192"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("models", help="list model geometries; `models show` sizes one model's KV cache")
    parser.add_argument("--dtype", help=f"size every model in this dtype: {', '.join(DTYPE_BYTES)} "
                        "(default: each model's own)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=handle_list)
    show = parser.add_subparsers(dest="models_command", metavar="SUBCOMMAND").add_parser(
        "show", help="geometry and KV size per rank and in total for some token counts")
    show.add_argument("model", help="catalog name, Hugging Face id, or path to a config.json")
    show.add_argument("--config", help="config file supplying the geometry (MODEL then picks the entry "
                      "of a multi-model file such as LMCache's modelconfig.json)")
    show.add_argument("--dtype", help=f"KV dtype: {', '.join(DTYPE_BYTES)} (default: the config's torch_dtype, "
                      "else bf16)")
    show.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    show.add_argument("--tokens", default=DEFAULT_TOKENS,
                      help=f"comma-separated token counts (default {DEFAULT_TOKENS})")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(handler=handle_show)


def handle_list(args: argparse.Namespace) -> int:
    dtype = normalize_dtype(args.dtype) if args.dtype else None
    rows: list[dict[str, Any]] = [
        {"name": name, "family": g.family, "layers": g.layers, "kv_heads": g.kv_heads, "head_dim": g.head_dim,
         "dtype": dtype or g.default_dtype, "bytes_per_token": g.bytes_per_token(dtype)}
        for name, g in catalog().items()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table("model", "family", "layers", "kv_heads", "head_dim", "dtype", "bytes/token", title="kvbench models")
    for row in rows:
        head_dim = "MLA" if row["head_dim"] is None else str(row["head_dim"])
        table.add_row(row["name"], row["family"], str(row["layers"]), str(row["kv_heads"]), head_dim,
                      row["dtype"], f"{row['bytes_per_token']:,}")
    console().print(table)
    return 0


def parse_tokens(text: str) -> list[int]:
    """Token counts from ``"1024,8192"``; rejected with the offending item named."""
    counts = []
    for item in text.split(","):
        try:
            count = int(item.strip().replace("_", ""))
        except ValueError:
            count = -1
        if count < 0:
            raise SpecError(f"--tokens: expected comma-separated non-negative integers, got {item.strip()!r}")
        counts.append(count)
    return counts


def show_dict(model: ResolvedModel, tokens: list[int]) -> dict[str, Any]:
    return {
        "model": model.to_dict(),
        "sizes": [{"tokens": n, "bytes_per_rank": model.kv_bytes(n),
                   "bytes_all_ranks": n * model.bytes_per_token_all_ranks} for n in tokens],
    }


def handle_show(args: argparse.Namespace) -> int:
    dtype = normalize_dtype(args.dtype) if args.dtype else None
    model = resolve_model(args.model, dtype, args.tp, config=args.config)
    data = show_dict(model, parse_tokens(args.tokens))
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    info = data["model"]
    shape = (["kv_lora_rank", "qk_rope_head_dim"] if info["family"] == "MLA"
             else ["kv_heads", "kv_heads_per_rank", "head_dim"])
    if info["cla_share_factor"] > 1:
        shape.append("cla_share_factor")
    facts = Table.grid(padding=(0, 2))
    for key in ["family", "layers", "kv_layers", *shape, "attention_heads", "hidden_size", "dtype", "tp",
                "bytes_per_token", "bytes_per_token_all_ranks", "source"]:
        value = info[key]
        facts.add_row(key, f"{value:,}" if isinstance(value, int) else str(value))
    out = console()
    out.print(f"[bold]{info['name']}[/bold]")
    out.print(facts)
    sizes = Table("tokens", "KV per rank", "KV all ranks")
    for row in data["sizes"]:
        sizes.add_row(f"{row['tokens']:,}", format_bytes(row["bytes_per_rank"]), format_bytes(row["bytes_all_ranks"]))
    out.print(sizes)
    return 0
