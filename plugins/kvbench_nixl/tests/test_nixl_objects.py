"""ObjectPieces' clean-up of a failed or cancelled write (OBJ mode's entries as objects), with a fake agent and
control plane: which DeleteObjects a write that did not complete sends, not how NIXL moves bytes."""

from __future__ import annotations

import pytest
from kvbench_nixl.objects import ObjectPieces

from kvbench_core.contracts.errors import Cancelled

PIECE = 1024


class FakeControl:
    """The s3 tier's control plane as ObjectPieces uses it: a prefix and one delete per object."""

    key_prefix = "kvbench/run/"

    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete(self, name: str) -> None:
        self.deleted.append(name)


class FakeAgent:
    def register(self, pieces: list[tuple[int, int, int, str]], memory: str) -> object:
        return object()

    def deregister(self, registration: object) -> None:
        pass


def test_a_failed_write_deletes_only_the_pieces_it_sent() -> None:
    control = FakeControl()
    objects = ObjectPieces(control, PIECE)
    with pytest.raises(OSError), objects.writing(FakeAgent(), "k", 10 * PIECE) as descriptor:  # type: ignore[arg-type]
        descriptor(0, PIECE)
        descriptor(PIECE, PIECE)
        raise OSError("the server went away")
    assert control.deleted == ["k.p0", "k.p1"]  # not the 8 pieces never sent: one DeleteObject each


def test_a_cancelled_write_deletes_nothing_and_the_entry_is_gone() -> None:
    """The drain limit ran out: the run's close removes the prefix in batches; deleting piece by piece
    here kept the worker past the cancel grace, and the run's figures were read while it still booked."""
    control = FakeControl()
    objects = ObjectPieces(control, PIECE)
    with objects.writing(FakeAgent(), "k", 2 * PIECE) as descriptor:  # type: ignore[arg-type]
        descriptor(0, PIECE)
    with pytest.raises(Cancelled), objects.writing(FakeAgent(), "k", 3000 * PIECE) as descriptor:  # type: ignore[arg-type]
        descriptor(0, PIECE)
        raise Cancelled("the drain limit ran out")
    assert control.deleted == []
    with pytest.raises(FileNotFoundError), objects.reading(FakeAgent(), "k"):  # type: ignore[arg-type]
        pass
