"""How one KV object becomes device commands: the transfer geometry shared by project, replay and score.

An operation of ``n`` bytes is issued as ``n // max_transfer`` full commands
plus one tail command rounded up to ``align`` (the engine's block alignment,
e.g. LMCache raw_block's 4 KiB ``block_align``), exactly as a userspace engine
without a block layer splits it.  A store may also write a small header op
first (raw_block writes one per object; see ``store_header_bytes``), a load
reads the payload only.  Command sizes are compared in log2 bins so that the
size *distribution* of a projection and a measurement can be scored.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from kvbench_core.contracts.errors import SpecError

DEFAULT_MAX_TRANSFER = 128 << 10  # a common NVMe MDTS, and raw_block's max_data_transfer_size in the seed
DEFAULT_ALIGN = 4096
#: One aligned block per store, so that a 20 MiB object gives the seed's 161 store / 160 load commands.
DEFAULT_STORE_HEADER_BYTES = 4096

OPS = ("store", "load")


@dataclass(frozen=True)
class TransferGeometry:
    """The device-facing knobs: largest command, tail alignment, header written per store."""

    max_transfer: int = DEFAULT_MAX_TRANSFER
    align: int = DEFAULT_ALIGN
    store_header_bytes: int = DEFAULT_STORE_HEADER_BYTES

    def __post_init__(self) -> None:
        if self.max_transfer < 1 or self.align < 1 or self.store_header_bytes < 0:
            raise SpecError(f"transfer geometry needs max_transfer >= 1, align >= 1 and a header >= 0 bytes, "
                            f"got {self.max_transfer}, {self.align}, {self.store_header_bytes}")
        if self.max_transfer % self.align:
            raise SpecError(f"max transfer {self.max_transfer} B is not a multiple of the alignment {self.align} B")

    def op_commands(self, nbytes: int) -> Counter[int]:
        """Command sizes (size -> count) of one ``nbytes`` operation."""
        full, tail = divmod(nbytes, self.max_transfer)
        commands: Counter[int] = Counter()
        if full:
            commands[self.max_transfer] = full
        if tail:
            commands[-(-tail // self.align) * self.align] += 1
        return commands

    def store_commands(self, nbytes: int) -> Counter[int]:
        return self.op_commands(self.store_header_bytes) + self.op_commands(nbytes)

    def load_commands(self, nbytes: int) -> Counter[int]:
        return self.op_commands(nbytes)

    def commands(self, op: str, nbytes: int) -> Counter[int]:
        return self.store_commands(nbytes) if op == "store" else self.load_commands(nbytes)

    def transfer_for(self, largest_op: int) -> int:
        """The smallest command size limit that splits every op of at most ``largest_op`` bytes as this
        geometry does: the max transfer, or, when one command holds a whole op (an engine that issues an
        object as one call), that op rounded up to the alignment.  A tier told to move that much per command
        reissues the projection's commands without a buffer of ``max_transfer`` bytes (2 GiB for such engines)."""
        return min(self.max_transfer, max(-(-largest_op // self.align) * self.align, self.align))

    def splits_like(self, transfer: int, largest_op: int) -> bool:
        """Whether a tier moving ``transfer`` bytes per command splits every op as this geometry does."""
        needed = self.transfer_for(largest_op)
        return transfer == self.max_transfer or (needed < self.max_transfer and transfer >= needed)

    def to_dict(self) -> dict[str, int]:
        return {"max_transfer": self.max_transfer, "align": self.align, "store_header_bytes": self.store_header_bytes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TransferGeometry:
        return cls(data["max_transfer"], data["align"], data["store_header_bytes"])


def size_bin(nbytes: int) -> int:
    """The log2 bin of a command size: the largest power of two <= ``nbytes`` (0 for empty commands)."""
    return 1 << (nbytes.bit_length() - 1) if nbytes > 0 else 0


def log2_histogram(commands: Counter[int]) -> Counter[int]:
    """Command counts per log2 size bin."""
    histogram: Counter[int] = Counter()
    for size, count in commands.items():
        histogram[size_bin(size)] += count
    return histogram


def total_bytes(commands: Counter[int]) -> int:
    return sum(size * count for size, count in commands.items())
