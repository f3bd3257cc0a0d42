"""``kvbench project``: project a model's KV-offload objects and device commands, with no I/O and no GPU.

The command was ``kvbench plan`` (the kvio seed's ``kvio plan``); "plan" names only the run plan now
(runspec/plan.py).  ``kvbench plan`` still works for one release, through cli/renamed.py (docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from kvbench_core.cli.console import console
from kvbench_core.codecs.codec_projection import CodecProjection, projection_from_result
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.units import format_bytes, parse_size
from kvbench_core.kvio.commands import DEFAULT_ALIGN, DEFAULT_MAX_TRANSFER, DEFAULT_STORE_HEADER_BYTES, TransferGeometry
from kvbench_core.kvio.manifest import PROJECTION_FORMAT, VERSION
from kvbench_core.kvio.presets import BACKENDS, ENGINES, EnginePreset, engine_preset
from kvbench_core.kvio.projection import DEFAULT_CHUNK_TOKENS, build_manifest, summarize
from kvbench_core.runspec.geometry import DTYPE_BYTES, resolve_model


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("project", help="project a model's KV-offload objects and device commands (no I/O)")
    parser.add_argument("--model", help="catalog name or Hugging Face id (or the entry to pick from --config)")
    parser.add_argument("--config", help="config.json (or LMCache modelconfig.json) supplying the geometry")
    parser.add_argument("--dtype", help=f"KV dtype: {', '.join(DTYPE_BYTES)} (default: the config's, else bf16)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree: objects per chunk (default 1)")
    parser.add_argument("--chunk-tokens", type=int,
                        help=f"tokens per stored chunk (default {DEFAULT_CHUNK_TOKENS}, LMCache's)")
    amount = parser.add_mutually_exclusive_group(required=True)
    amount.add_argument("--tokens", type=int, help="prompt length; a shorter last chunk follows --tail-chunk")
    amount.add_argument("--num-chunks", type=int, help="number of full chunks")
    parser.add_argument("--tail-chunk", choices=("keep", "drop"),
                        help="store a partial last chunk (keep: LMCache's save_unfull_chunk true) or not "
                             "(drop); default keep, or the --engine preset's")
    engine = parser.add_argument_group("engine preset", "an engine version's defaults for chunking, tail chunk, "
                                       "header and command sizes (docs/kvio.md); a flag given still wins")
    engine.add_argument("--engine", choices=ENGINES, help="the engine whose defaults to project with")
    engine.add_argument("--backend", choices=BACKENDS, help="the engine's storage backend")
    add_geometry_arguments(parser)
    parser.set_defaults(max_transfer=None, align=None, store_header_bytes=None)  # None: the preset's or default
    parser.add_argument("--prefill-tokens-per-sec", type=float,
                        help="prefill rate R: report the bandwidth above which loading beats recomputing")
    codec = parser.add_argument_group("codec", "store objects encoded: a declared codec, or one a run measured")
    codec.add_argument("--codec-ratio", type=float, help="logical / physical bytes, e.g. 1.38")
    codec.add_argument("--codec-decode-bytes-per-sec", type=float,
                       help="decode rate of one core in logical bytes/s (decode after each load)")
    codec.add_argument("--codec-from", metavar="RESULT", help="a kvbench result whose tier ran a codec: its "
                                                             "measured ratio and per-core decode rate")
    codec.add_argument("--codec-decode-cores", type=int, default=1,
                       help="cores decoding one object's chunks in parallel (default 1, as kvbench's stage)")
    codec.add_argument("--codec-tier", help="which tier of --codec-from (default: the first with a codec)")
    parser.add_argument("--record", metavar="MANIFEST", help="write the object manifest for replay/score here")
    parser.add_argument("--json", action="store_true", help="print the projection (with its manifest) as JSON")
    parser.set_defaults(handler=handle)


def add_geometry_arguments(parser: argparse.ArgumentParser) -> None:
    """The transfer-geometry flags, shared by ``project`` and ``score --semantic``."""
    parser.add_argument("--max-transfer", default="128KiB",
                        help=f"largest device command, e.g. the device MDTS (default {DEFAULT_MAX_TRANSFER} B)")
    parser.add_argument("--align", default=str(DEFAULT_ALIGN),
                        help=f"command tails round up to this (default {DEFAULT_ALIGN}; the engine's block_align)")
    parser.add_argument("--store-header-bytes", default=str(DEFAULT_STORE_HEADER_BYTES),
                        help="header op written before each stored object (default 4096, one aligned block as "
                             "LMCache raw_block writes; 0 for tiers that write none, such as nvme)")


def geometry_from(args: argparse.Namespace, preset: EnginePreset | None = None) -> TransferGeometry:
    """The transfer geometry of the flags; a flag not given (None) is the preset's, else the default."""
    base = preset.geometry if preset is not None else TransferGeometry()
    flags = {"max_transfer": "--max-transfer", "align": "--align", "store_header_bytes": "--store-header-bytes"}
    return TransferGeometry(**{name: getattr(base, name) if getattr(args, name, None) is None
                               else size_argument(flag, getattr(args, name)) for name, flag in flags.items()})


def preset_from(args: argparse.Namespace) -> EnginePreset | None:
    """The ``--engine``/``--backend`` preset, or None; a backend without an engine is refused."""
    if args.engine is None:
        if args.backend is not None:
            raise SpecError(f"--backend {args.backend} needs --engine: one of {', '.join(ENGINES)}")
        return None
    return engine_preset(args.engine, args.backend)


def size_argument(flag: str, value: str) -> int:
    """Bytes from a CLI size ("128KiB", "4096"); errors name the flag."""
    try:
        return parse_size(value)
    except ValueError as error:
        raise SpecError(f"{flag}: {error}") from None


def handle(args: argparse.Namespace) -> int:
    if not args.model and not args.config:
        raise SpecError("give a model (--model NAME) or a config file (--config config.json)")
    model = resolve_model(args.model or "", args.dtype, args.tp, config=args.config)
    preset = preset_from(args)
    chunk_tokens = args.chunk_tokens if args.chunk_tokens is not None else \
        (preset.chunk_tokens if preset else DEFAULT_CHUNK_TOKENS)
    keep_tail = args.tail_chunk == "keep" if args.tail_chunk else (preset.keep_tail if preset else True)
    manifest = build_manifest(model, geometry_from(args, preset), chunk_tokens, tokens=args.tokens,
                              num_chunks=args.num_chunks, keep_tail=keep_tail, preset=preset)
    summary = summarize(manifest, args.prefill_tokens_per_sec, codec_from(args))
    if args.record:
        manifest.write(args.record)
    if args.json:
        print(json.dumps({"format": PROJECTION_FORMAT, "version": VERSION, "summary": summary,
                          "manifest": manifest.to_dict()}, indent=2))
    else:
        render(summary)
        if args.record:
            console().print(f"manifest: {args.record} ({len(manifest.objects)} objects)")
    return 0


def codec_from(args: argparse.Namespace) -> CodecProjection | None:
    """The codec the projection assumes: measured (--codec-from) or declared (--codec-ratio), or none."""
    if args.codec_from and args.codec_ratio is not None:
        raise SpecError("give either --codec-from RESULT or --codec-ratio, not both")
    if args.codec_from:
        from kvbench_core.results.result import read_result

        return projection_from_result(read_result(args.codec_from), args.codec_tier, path=args.codec_from,
                                      decode_cores=args.codec_decode_cores)
    if args.codec_tier or (args.codec_decode_bytes_per_sec is not None and args.codec_ratio is None):
        raise SpecError("--codec-tier and --codec-decode-bytes-per-sec need a codec: --codec-from or --codec-ratio")
    if args.codec_ratio is None:
        return None
    return CodecProjection(ratio=args.codec_ratio, decode_bytes_per_s=args.codec_decode_bytes_per_sec,
                           decode_cores=args.codec_decode_cores)


def _size(nbytes: float) -> str:
    return f"{format_bytes(nbytes)} ({int(nbytes):,} B)" if nbytes >= 1024 else f"{int(nbytes)} B"


def _header_lines(summary: dict[str, Any]) -> list[str]:
    """The model, the chunking, the engine preset and the geometry, a line each."""
    model, chunking, geometry = summary["model"], summary["chunking"], summary["geometry"]
    lines = [f"[bold]{model['name']}[/bold]  {model['family']}  {model['dtype']}  TP {model['tp']}  "
             f"{model['bytes_per_token']:,} B/token per rank",
             f"chunks: {chunking['chunks']} × {chunking['chunk_tokens']} tokens ({chunking['tokens']:,} tokens), "
             f"{chunking['objects_per_chunk']} object(s) per chunk"]
    if chunking.get("unstored_tokens"):
        lines.append(f"tail chunk dropped: the last {chunking['unstored_tokens']:,} tokens fill no whole chunk and "
                     "are not stored (--tail-chunk keep stores them)")
    engine = summary.get("engine")
    if engine:
        slot = f", slot {engine['slot_bytes']:,} B per object" if engine.get("slot_bytes") else ""
        lines.append(f"engine preset: {engine['name']} {engine['backend']} (tail chunk {engine['tail_chunk']}"
                     f"{slot}; rules and their sources: --json, docs/kvio.md)")
    lines.append(f"geometry: max transfer {_size(geometry['max_transfer'])}, align {geometry['align']} B, "
                 f"store header {geometry['store_header_bytes']} B")
    return lines


def _print_codec(out: Any, summary: dict[str, Any]) -> None:
    """The codec line and the objects as they are stored encoded."""
    codec = summary["codec"]
    decode = codec["decode_bytes_per_s"]
    rate = f"{format_bytes(decode)}/s per core x {codec['decode_cores']}" if decode else "not given (0 s)"
    out.print(f"codec: {codec['name']} ({codec['source']}), ratio {codec['ratio']:.3f}, decode {rate}")
    encoded = Table("payload per object", "encoded", "store cmds", "load cmds", "store device bytes",
                    "load device bytes", title="objects stored encoded")
    for row in summary["object_classes"]:
        encoded.add_row(_size(row["payload_bytes"]), _size(row["encoded_bytes"]),
                        str(row["encoded_store_commands"]), str(row["encoded_load_commands"]),
                        f"{row['encoded_store_device_bytes']:,}",
                        f"{row['encoded_load_device_bytes']:,}")
    out.print(encoded)


def render(summary: dict[str, Any]) -> None:
    """The projection as a few terminal tables."""
    out = console()
    for line in _header_lines(summary):
        out.print(line)
    objects = Table("payload per object", "tokens", "objects", "store cmds", "load cmds", "store device bytes",
                    "load device bytes", title="objects")
    for row in summary["object_classes"]:
        objects.add_row(_size(row["payload_bytes"]), str(row["tokens"]), str(row["objects"]),
                        str(row["store_commands"]), str(row["load_commands"]),
                        f"{row['store_device_bytes']:,}", f"{row['load_device_bytes']:,}")
    out.print(objects)
    if "codec" in summary:
        _print_codec(out, summary)
    sizes = Table("command size (log2 bin)", "store", "load", title="command sizes")
    for row in summary["command_sizes"]:
        sizes.add_row(f"≥ {format_bytes(row['bin_bytes'])}", f"{row['store']:,}", f"{row['load']:,}")
    out.print(sizes)
    totals, frag = summary["totals"], summary["fragmentation"]
    table = Table("", "store", "load", title=f"totals: {totals['objects']} objects, "
                                             f"payload {_size(totals['payload_bytes'])}")
    table.add_row("commands", f"{totals['store_commands']:,}", f"{totals['load_commands']:,}")
    table.add_row("device bytes", f"{totals['store_device_bytes']:,}", f"{totals['load_device_bytes']:,}")
    table.add_row("partial commands", *(f"{frag[op]['partial_commands']:,} ({frag[op]['partial_fraction']:.1%})"
                                        for op in ("store", "load")))
    table.add_row("mean command", *(_size(frag[op]["mean_command_bytes"]) for op in ("store", "load")))
    table.add_row("fill vs max transfer", *(f"{frag[op]['fill_ratio']:.1%}" for op in ("store", "load")))
    table.add_row("overhead bytes", *(f"{frag[op]['overhead_bytes']:,}" for op in ("store", "load")))
    out.print(table)
    if "load_vs_recompute" in summary:
        recompute = summary["load_vs_recompute"]
        coded = "codec" in summary
        columns = ["payload per object", "tokens", "recompute", "break-even per object", "break-even all ranks"]
        table = Table(*columns, *(["decode", "with codec: device per object"] if coded else []),
                      title=f"load vs recompute at {recompute['prefill_tokens_per_sec']:,.0f} prefill tokens/s")
        for row in recompute["classes"]:
            cells = [_size(row["payload_bytes"]), str(row["tokens"]), f"{row['recompute_s'] * 1e3:.2f} ms",
                     f"{format_bytes(row['breakeven_bytes_per_s'])}/s",
                     f"{format_bytes(row['breakeven_bytes_per_s_all_ranks'])}/s"]
            if coded:
                device = row["breakeven_device_bytes_per_s_with_codec"]
                cells += [f"{row['decode_s'] * 1e3:.2f} ms",
                          f"{format_bytes(device)}/s" if device else "never: decoding alone is slower"]
            table.add_row(*cells)
        out.print(table)
        out.print("loading beats recomputing when the storage path sustains more than the break-even bandwidth")
