"""ShareGPT conversation replay (seed §8.2): real chats, played by a closed loop of users.

A file is one JSON array of ``{"id", "conversations": [{"from", "value"}...]}``.
Each prompt (a human turn, with any system text before it) that has a reply
becomes a request: its context is the whole conversation so far, its
generation the reply.  The turns of a conversation chain their KV entries
(``kvplan``): a later turn reads what the earlier ones stored and writes only
the tokens it adds.

User u plays conversations u, u+users, u+2·users… of the replay (counted
across cycles), each to its end, pausing ``think_time`` after every request.
A user the autoscaler adds beyond ``users`` replays the lane of user
``u % users`` as conversations of its own (keys marked ``.u{u}``).

Limits, as in the seed's config: a conversation's first request is cut to
``max_context_tokens``; a later one that would exceed it is dropped, and so
are the rest, since contexts only grow (the history no longer fits the
model's window).  Replies are cut to ``max_generate_tokens`` and the history
keeps the cut reply, which is what the engine generated.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, ClassVar

from kvbench_core.contracts.workload import Request, WorkloadContext
from kvbench_workloads.kvplan import TraceEntry, cycle_stem, key_part
from kvbench_workloads.replay import TraceSource, options_schema
from kvbench_workloads.rows import LoadReport, RowError, json_array, required
from kvbench_workloads.tokens import token_counter

PROMPT_ROLES = frozenset({"human", "user"})
CONTEXT_ROLES = frozenset({"system"})
REPLY_ROLES = frozenset({"gpt", "assistant", "chatgpt", "bard", "bing", "model"})
_ROLE_SET = PROMPT_ROLES | CONTEXT_ROLES | REPLY_ROLES
_ROLES = ", ".join(sorted(_ROLE_SET))


class ShareGPTSource(TraceSource):
    """Replays ShareGPT conversations turn by turn, growing each context like the real chat."""

    name = "sharegpt"
    suffixes: ClassVar[tuple[str, ...]] = (".json",)
    empty_hint = ("; for prompts without replies set unanswered_generate_tokens (workload.options in a spec, "
                  "-o unanswered_generate_tokens=N for kvbench workload stats)")
    options_schema = options_schema(
        {
            "max_conversations": {"oneOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": 500,
                                  "description": "conversations to load, in file order; null = all"},
            "max_context_tokens": {"type": "integer", "minimum": 1, "default": 8192,
                                   "description": "context limit (the model's window)"},
            "max_generate_tokens": {"type": "integer", "minimum": 1, "default": 2048,
                                    "description": "replies are cut to this many tokens"},
            # Not "tokenizer": result redaction treats key names containing "token" as credentials,
            # except those ending in "tokens".
            "count_tokens": {"enum": ["auto", "tiktoken", "chars"], "default": "auto",
                             "description": "with tiktoken (auto: when usable offline) or chars_per_token"},
            "chars_per_token": {"type": "number", "exclusiveMinimum": 0, "default": 4,
                                "description": "characters per token of the estimate"},
            "unanswered_generate_tokens": {
                "oneOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": None,
                "description": "generation for a last prompt without reply (first-turn-only files); null = skip it",
            },
            "think_time": {"type": "number", "minimum": 0, "default": 0,
                           "description": "seconds a user pauses after each request"},
        },
        open_loop=False,
    )

    def __init__(self, options: dict[str, Any], context: WorkloadContext) -> None:
        super().__init__(options, context)
        self.tokens = token_counter(self.options["count_tokens"], self.options["chars_per_token"])
        report = LoadReport(self.options["skip_bad_rows"])
        self._conversations = self._load(report)
        self._summarize(((request, None) for request in self._cycle_requests()), report)
        self._users = {user: self._user_requests(user) for user in range(context.users)}

    def next_request(self, user_id: int) -> Request | None:
        with self._lock:
            if user_id not in self._users:  # added by the autoscaler
                self._users[user_id] = self._user_requests(user_id)
            return next(self._users[user_id], None)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "count_tokens": self.tokens.name}

    def _user_requests(self, user: int) -> Iterator[Request]:
        seqs = itertools.count()
        end = self.options["cycles"] * len(self._conversations)  # 0: no end
        for ordinal in itertools.count(user % self.context.users, self.context.users):
            if end and ordinal >= end:
                return
            yield from self._conversation_requests(ordinal, user, seqs)

    def _cycle_requests(self) -> Iterator[Request]:
        """The first cycle in conversation order, for the figures."""
        seqs = itertools.count()
        for ordinal in range(len(self._conversations)):
            yield from self._conversation_requests(ordinal, ordinal % self.context.users, seqs)

    def _conversation_requests(self, ordinal: int, user: int, seqs: Iterator[int]) -> Iterator[Request]:
        cycle, index = divmod(ordinal, len(self._conversations))
        name, turns = self._conversations[index]
        stem = cycle_stem(name, cycle) + (f".u{user}" if user >= self.context.users else "")
        conversation = self._conversation(stem, user, named=True)
        for entry in turns:
            yield self._request(conversation, entry, next(seqs), think_s=self.options["think_time"])

    def _load(self, report: LoadReport) -> list[tuple[str, list[TraceEntry]]]:
        """``(key-safe id, turns)`` of each conversation that has a request, up to ``max_conversations``."""
        limit = self.options["max_conversations"]
        conversations: list[tuple[str, list[TraceEntry]]] = []
        names: set[str] = set()
        for path in self.files:
            for line, element in json_array(path):
                if limit is not None and len(conversations) >= limit:
                    return conversations
                try:
                    raw_id, messages = _messages(element)
                except RowError as error:
                    report.bad_row(path, line, error)
                    continue
                name = key_part(str(raw_id)) if raw_id not in (None, "") else ""
                if not name or name in names:  # '~' never survives key_part: the marked name is unique
                    name = f"{name}~{len(conversations)}"
                turns = self._turns(messages, name, f"{path.name}:{line}", report)
                if not turns:
                    report.skip("conversations_without_requests")
                    continue
                names.add(name)
                conversations.append((name, turns))
        return conversations

    def _turns(self, messages: list[tuple[str, str]], name: str, origin: str,
               report: LoadReport) -> list[TraceEntry]:
        max_context, max_generate = self.options["max_context_tokens"], self.options["max_generate_tokens"]
        turns: list[TraceEntry] = []

        def turn(context: int, generate: int) -> int:
            """Add the request; returns its context as the engine held it (cut, for a first request)."""
            if context > max_context:
                if turns:
                    report.skip("over_context_limit")
                    return context
                context = max_context
            turns.append(TraceEntry(origin, context, generate, conversation=name))
            return context

        history = 0  # tokens of the conversation before the pending prompt
        pending = 0  # prompt (and system) tokens since the last reply
        asked = False  # pending holds a human prompt, not just system text
        for role, text in messages:
            tokens = self.tokens.count(text)
            if role not in REPLY_ROLES:
                pending += tokens
                asked = asked or role in PROMPT_ROLES
                continue
            generate = min(tokens, max_generate)
            history = (turn(history + pending, generate) if asked else history + pending) + generate
            pending, asked = 0, False
        if asked:
            unanswered = self.options["unanswered_generate_tokens"]
            if unanswered is None:
                report.skip("unanswered_prompts")
            else:
                turn(history + pending, min(unanswered, max_generate))
        return turns


def _messages(element: Any) -> tuple[Any, list[tuple[str, str]]]:
    """``(id, [(role, text)...])`` of one array element, every message checked before any is used."""
    if not isinstance(element, dict):
        raise RowError("entry", f"expected an object with 'id' and 'conversations', got {type(element).__name__}")
    raw = required(element, "conversations")
    if not isinstance(raw, list):
        raise RowError("conversations", f"expected a list of messages, got {type(raw).__name__}")
    messages = []
    for index, message in enumerate(raw):
        field = f"conversations[{index}]"
        if not isinstance(message, dict):
            raise RowError(field, "expected an object with 'from' and 'value'")
        role, text = message.get("from"), message.get("value")
        if not isinstance(role, str) or role.lower() not in _ROLE_SET:
            raise RowError(f"{field}.from", f"expected a role ({_ROLES}), got {role!r}")
        if not isinstance(text, str):
            raise RowError(f"{field}.value", f"expected a string, got {type(text).__name__}")
        messages.append((role.lower(), text))
    return element.get("id"), messages

