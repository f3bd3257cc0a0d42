"""The kvio record manifest: a few KB that pin down a KV-offload object set, without any payload.

It carries the model, dtype, TP and chunking it came from, the transfer
geometry (max transfer, alignment, store header), and per object its key,
``trace_id`` and payload size, which is all a replay needs to reissue the
same command stream on another device and all a validator needs to know what
each traced command should have been.  ``kvbench project --record`` writes one;
a run can write one too via ``Manifest.from_objects``.

Versioned JSON, one object per line so it diffs and greps well.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

from kvbench_core.contracts.backend import check_key
from kvbench_core.contracts.errors import InputFileError, SpecError
from kvbench_core.contracts.validation import schema_errors
from kvbench_core.engine.measure.iolog import TRACE_ID_BITS, trace_id_for
from kvbench_core.kvio.commands import TransferGeometry
from kvbench_core.runspec.jsonfile import JsonLinesGiven, json_line, read_json_text, write_text

FORMAT = "kvbench-kvio-manifest"
VERSION = 1
#: ``kvbench project --json`` output embeds a manifest under ``"manifest"``; readers accept either.
PROJECTION_FORMAT = "kvbench-kvio-projection"
#: The same output as ``kvbench plan --json`` wrote it before the kvio plan became the projection (issue #30):
#: still read, so the files users kept go on replaying and scoring; never written.
OLD_PLAN_FORMAT = "kvbench-kvio-plan"

_COUNT = {"type": "integer", "minimum": 0}
_POSITIVE = {"type": "integer", "minimum": 1}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["format", "version", "model", "geometry", "objects"],
    "properties": {
        "format": {"const": FORMAT},
        "version": {"const": VERSION},
        "model": {"type": "object"},
        "chunking": {"type": "object"},
        "engine": {"type": "object"},
        "geometry": {
            "type": "object",
            "required": ["max_transfer", "align", "store_header_bytes"],
            "properties": {"max_transfer": _POSITIVE, "align": _POSITIVE, "store_header_bytes": _COUNT},
        },
        "objects": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["key", "trace_id", "bytes"],
                "additionalProperties": False,
                "properties": {
                    "key": {"type": "string", "minLength": 1},
                    "trace_id": {"type": "integer", "minimum": 1, "maximum": (1 << TRACE_ID_BITS) - 1},
                    "bytes": _COUNT, "chunk": _COUNT, "rank": _COUNT, "tokens": _COUNT,
                },
            },
        },
    },
}


@dataclass(frozen=True)
class KVObject:
    """One stored KV object: a chunk's KV on one TP rank (``chunk``/``rank``/``tokens`` when known)."""

    key: str
    nbytes: int
    chunk: int | None = None
    rank: int | None = None
    tokens: int | None = None


@dataclass(frozen=True)
class Manifest:
    """An object set with its trace ids and the geometry it is issued with."""

    model: dict[str, Any]
    geometry: TransferGeometry
    objects: tuple[KVObject, ...]
    trace_ids: dict[str, int]
    chunking: dict[str, Any] = field(default_factory=dict)
    #: the engine preset the projection followed (kvio/presets.py: its rules and their sources); empty for none
    engine: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_objects(cls, objects: Iterable[KVObject], *, model: dict[str, Any], geometry: TransferGeometry,
                     chunking: dict[str, Any] | None = None, engine: dict[str, Any] | None = None) -> Manifest:
        """Assign every object a trace id: the key's derived id (what an ``IOLog`` without a map uses),
        moved to the next free id in the rare case two keys collide in 32 bits."""
        objects = tuple(objects)
        trace_ids: dict[str, int] = {}
        used: set[int] = set()
        for obj in objects:
            if obj.key in trace_ids:
                raise SpecError(f"duplicate KV object key {obj.key!r}")
            trace_id = trace_id_for(obj.key)
            while trace_id in used:
                trace_id = trace_id % ((1 << TRACE_ID_BITS) - 1) + 1
            trace_ids[obj.key] = trace_id
            used.add(trace_id)
        return cls(model, geometry, objects, trace_ids, dict(chunking or {}), dict(engine or {}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "model": self.model, "chunking": self.chunking,
            **({"engine": self.engine} if self.engine else {}), "geometry": self.geometry.to_dict(),
            "objects": [
                {"key": obj.key, "trace_id": self.trace_ids[obj.key], "bytes": obj.nbytes,
                 **{name: value for name, value in (("chunk", obj.chunk), ("rank", obj.rank), ("tokens", obj.tokens))
                    if value is not None}}
                for obj in self.objects
            ],
        }

    def to_json(self) -> str:
        data = self.to_dict()
        objects = data.pop("objects")
        head = json.dumps(data, indent=2)[:-2]  # reopen the top-level object to append "objects"
        lines = ",\n".join("    " + json.dumps(obj, separators=(",", ":")) for obj in objects)
        return f'{head},\n  "objects": [\n{lines}\n  ]\n}}\n'

    def write(self, path: str) -> None:
        write_text(path, self.to_json(), "manifest")

    @classmethod
    def from_dict(cls, data: Any, where: str, text: str | None = None) -> Manifest:
        """Parse a manifest (or the manifest inside a projection JSON, either format id); errors name
        ``where`` and the field, and, given the file's ``text``, the line the field is on."""
        if isinstance(data, dict) and data.get("format") in (PROJECTION_FORMAT, OLD_PLAN_FORMAT):
            data, root = data.get("manifest"), "manifest"
        else:
            root = ""

        def at(*parts: str | int) -> str:
            line = json_line(text, [root, *parts] if root else parts) if text is not None else None
            return f"{where}:{line}" if line else where

        messages = schema_errors(data, SCHEMA, root)
        if messages:
            more = f" (and {len(messages) - 1} more)" if len(messages) > 1 else ""
            first = min(Draft202012Validator(SCHEMA).iter_errors(data),  # the error messages[0] describes
                        key=lambda e: (list(e.absolute_path), e.validator), default=None)
            raise InputFileError(f"{at(*first.absolute_path) if first else where}: {messages[0]}{more}")
        objects, trace_ids, used = [], {}, set()
        prefix = f"{root}." if root else ""
        for index, item in enumerate(data["objects"]):
            path = f"{prefix}objects[{index}]"
            try:
                key = check_key(item["key"])
            except ValueError as error:
                raise InputFileError(f"{at('objects', index, 'key')}: {path}.key: {error}") from None
            if key in trace_ids:
                raise InputFileError(f"{at('objects', index, 'key')}: {path}.key: duplicate key {key!r}")
            if item["trace_id"] in used:
                raise InputFileError(f"{at('objects', index, 'trace_id')}: {path}.trace_id: {item['trace_id']} "
                                     "is used twice")
            trace_ids[key] = item["trace_id"]
            used.add(item["trace_id"])
            objects.append(KVObject(key, item["bytes"], item.get("chunk"), item.get("rank"), item.get("tokens")))
        try:
            geometry = TransferGeometry.from_dict(data["geometry"])
        except SpecError as error:
            raise InputFileError(f"{where}: {prefix}geometry: {error}") from None
        return cls(data["model"], geometry, tuple(objects), trace_ids, data.get("chunking", {}),
                   data.get("engine", {}))

    @classmethod
    def read(cls, path: str) -> Manifest:
        """A manifest file, or the manifest embedded in a ``kvbench project --json`` output."""
        try:
            data, text = read_json_text(path, "manifest")
        except JsonLinesGiven:
            raise InputFileError(f"{path}: JSON lines (one record per line), not a kvio manifest; an I/O log "
                                 "goes to --measured, LMCache's semantic trace to --semantic") from None
        if isinstance(data, dict) and "kvbench_result" in data:
            raise InputFileError(f"{path}: a kvbench result, not a kvio manifest; make one with "
                                 "`kvbench project --record MANIFEST`") from None
        return cls.from_dict(data, path, text)
