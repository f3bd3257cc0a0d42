"""Old spellings of renamed commands, flags and values, still accepted for one release (docs/cli.md).

Each word of the command line means one thing ("check" a result against rules, "conformance" of a
backend, "validate" a spec, "score" an I/O log against a kvio projection, "plan" only the run plan); the
spellings that meant something else before keep working so that users' scripts do not break, but each
use costs one line on stderr naming the new spelling, and ``--help`` lists only the new ones.

A notice is held until the command is over: printed when it succeeds, folded into the command's one error
line when it is refused (``kvbench: error: ... (note: `validate` is now `score`)``), so one mistake is still one
line; a command line argparse refuses prints argparse's usage of the new spelling, which names it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

#: Old top-level command -> the command it is now.
RENAMED_COMMANDS = {"validate": "score", "plan": "project"}


#: The notices of the command line being handled, in the order its words came.
_pending: list[str] = []


def notice(old: str, new: str) -> None:
    """The one line a renamed spelling costs: old scripts go on working, and say what to write."""
    _pending.append(f"`{old}` is now `{new}`")


def take_notices() -> list[str]:
    """The notices held so far, forgotten here: the CLI prints them after a command that succeeded, or
    folds them into its error line, and an earlier in-process command's leave nothing behind."""
    taken = list(_pending)
    _pending.clear()
    return taken


def print_notices(notices: Sequence[str]) -> None:
    for text in notices:
        print(f"kvbench: {text}", file=sys.stderr)


def folded(line: str, notices: Sequence[str]) -> str:
    """An error line with the command's rename notices at its end, so the refusal stays one line."""
    return f"{line} (note: {'; '.join(notices)})" if notices else line


def renamed_command_line(argv: Sequence[str]) -> list[str]:
    """``argv`` with an old command word replaced by its new one, its notice held.  Done before parsing,
    so the old names appear nowhere in the parser: not in ``--help``, not in an "invalid choice" list.  The
    command is the first word that is not an option (the top-level options, ``--version`` and ``--help``,
    take no value)."""
    words = list(argv)
    at = next((index for index, word in enumerate(words) if not word.startswith("-")), None)
    if at is not None and words[at] == "validate" and _names_a_spec(words[at + 1:]):
        # The old ``validate`` (the kvio scorer) took no file argument: ``validate spec.yaml`` is a new
        # user's first guess at validating a spec, which is ``spec validate``.
        _pending.append(f"`validate SPEC` is `spec validate SPEC`; `validate` alone, the kvio scorer, is now "
                        f"`{RENAMED_COMMANDS['validate']}`")
        return [*words[:at], "spec", *words[at:]]
    if at is not None and words[at] in RENAMED_COMMANDS:
        notice(words[at], RENAMED_COMMANDS[words[at]])
        words[at] = RENAMED_COMMANDS[words[at]]
    return words


def _names_a_spec(words: Sequence[str]) -> bool:
    """A YAML file among the words and none of the scorer's inputs: a spec to validate."""
    scorer = {"--projection", "--plan", "--semantic", "--measured", "--tracer"}
    return (any(word.endswith((".yaml", ".yml")) for word in words if not word.startswith("-"))
            and not any(word.split("=")[0] in scorer for word in words))


def _command_of(parser: argparse.ArgumentParser) -> str:
    """``kvbench plugins`` -> ``plugins``: how the notice names the command a flag belongs to."""
    return parser.prog.removeprefix("kvbench ")


class RenamedFlag(argparse.Action):
    """An old flag spelling: stores into the new flag's destination after the notice.  Add it with
    ``help=argparse.SUPPRESS`` so ``--help`` shows only the new flag; ``new`` is the new spelling."""

    def __init__(self, option_strings: list[str], dest: str, *, new: str, **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        command = _command_of(parser)
        notice(f"{command} {option_string}", f"{command} {self.new}")
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)  # a switch stores const


def add_renamed_switch(parser: argparse.ArgumentParser, old: str, new: str, dest: str) -> None:
    """An old spelling of the ``store_true`` switch ``new``."""
    parser.add_argument(old, dest=dest, action=RenamedFlag, new=new, nargs=0, const=True,
                        help=argparse.SUPPRESS)


def renamed_values(flag: str, renamed: dict[str, str]) -> Callable[[str], str]:
    """An argparse ``type`` for a flag whose values were renamed: an old value becomes the new one (after
    the notice) before argparse checks it against the flag's choices, which list only the new ones."""

    def convert(value: str) -> str:
        if value in renamed:
            notice(f"{flag} {value}", f"{flag} {renamed[value]}")
            return renamed[value]
        return value

    return convert
