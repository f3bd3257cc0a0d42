"""The built-in ``synthetic`` workload source (seed §3.9–3.12, §4.1, §4.8, §8.1).

User profiles (chatbot / coding / document) with the seed's context,
generation and think-time ranges; QoS classes mixed 15/35/50; multi-turn
conversations whose turns read the previous turn's entry and store their
whole grown context under their own key, as the seed's reference does (§3.1:
the context size is the write size; §8.1: each turn can use the previous
turn's KV), so decode reads and turn reads cover the full context; shared system
prompts stored once under a key named by the prompt's content and the tokens it covers; RAG queries that load top-k
document-chunk entries before their prefill; closed-loop users with think
time or open-loop Poisson arrivals; mixed, prefill-only and decode-only modes.

Determinism: each user draws from its own RNG stream seeded by (seed, user),
so a user's request sequence does not depend on thread timing; the open-loop
arrival clock has its own stream.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.validation import with_defaults
from kvbench_core.contracts.workload import Phase, Read, Request, WorkloadContext, WorkloadSource, Write

DEFAULT_PROFILES: dict[str, dict[str, list[float]]] = {
    "chatbot": {"context": [512, 4096], "generate": [50, 200], "think_s": [0.1, 0.5]},
    "coding": {"context": [4096, 25000], "generate": [100, 500], "think_s": [0.2, 1.0]},
    "document": {"context": [4096, 16384], "generate": [200, 800], "think_s": [0.3, 1.5]},
}
DEFAULT_QOS_MIX = {"interactive": 0.15, "responsive": 0.35, "batch": 0.50}
SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are an AI assistant helping with coding tasks.",
    "You are a professional writing assistant.",
)
DECODE_ONLY_ENTRIES_PER_USER = 10
#: The seed's ConversationManager defaults (config.yaml: max_turns_per_conv 50, max_conversations 1000):
#: conversation metadata beyond the limit is forgotten (its cache entries stay until evicted).
MAX_TURNS = 50
MAX_LIVE_CONVERSATIONS = 1000

_RANGE = {"type": "array", "items": {"type": "number", "minimum": 0}, "minItems": 2, "maxItems": 2}
_PROB = {"type": "number", "minimum": 0, "maximum": 1}


def _section(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, **extra}


def _defaulted(schema: dict[str, Any], default: Any) -> dict[str, Any]:
    return {**schema, "default": default}


def _defaulted_section(properties: dict[str, Any]) -> dict[str, Any]:
    """A section a spec may leave out or give in part: every field it omits takes its own default."""
    return _section(properties, default={})


#: Every default lives here (``with_defaults`` fills a section's fields even when the spec gives some of them),
#: except the profiles: a spec's ``profiles`` are merged over ``DEFAULT_PROFILES`` range by range.
OPTIONS_SCHEMA: dict[str, Any] = _section({
    "profiles": {"type": "object", "additionalProperties": _section(
        {"context": _RANGE, "generate": _RANGE, "think_s": _RANGE}),
        "description": "ranges per user profile, over the seed's chatbot/coding/document ranges"},
    "profile_mix": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0},
                    "description": "weight per profile (default: the seed's three profiles, equally)"},
    "qos_mix": _defaulted_section({name: _defaulted(_PROB, share) for name, share in DEFAULT_QOS_MIX.items()}),
    "multi_turn": _defaulted_section({
        "enabled": {"type": "boolean", "default": True}, "max_turns": {"type": "integer", "minimum": 1,
                                                                      "default": MAX_TURNS},
        "end_probability": _defaulted(_PROB, 0.2),
        "max_live_conversations": {"type": "integer", "minimum": 1, "default": MAX_LIVE_CONVERSATIONS},
        "turn_tokens": _defaulted(_RANGE, [64, 1024])}),
    "prefix_caching": _defaulted_section({
        "enabled": {"type": "boolean", "default": True}, "probability": _defaulted(_PROB, 0.5),
        "prompts": {"type": "integer", "minimum": 1, "maximum": 1000, "default": len(SYSTEM_PROMPTS)},
        "prefix_tokens": _defaulted(_RANGE, [128, 1024])}),
    "rag": _defaulted_section({
        "enabled": {"type": "boolean", "default": False}, "probability": _defaulted(_PROB, 0.1),
        "documents": {"type": "integer", "minimum": 1, "default": 20},
        "chunks_per_document": {"type": "integer", "minimum": 1, "default": 8},
        "chunk_tokens": {"type": "integer", "minimum": 1, "default": 512},
        "top_k": {"type": "integer", "minimum": 1, "default": 5}}),
    "arrival": _defaulted_section({"process": {"enum": ["closed", "poisson"], "default": "closed"},
                                   "rate": {"type": "number", "exclusiveMinimum": 0, "default": 10.0,
                                            "description": "requests per second (poisson)"}}),
    "no_reads": {"type": "boolean", "default": False,
                 "description": "prefill-only: issue no reads at all (no turns, prefixes or RAG)"},
})


def merged_profiles(options: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    """The seed's profiles with the spec's overrides; a partial override keeps the other default ranges."""
    profiles = {name: dict(ranges) for name, ranges in DEFAULT_PROFILES.items()}
    for name, ranges in (options.get("profiles") or {}).items():
        profiles[name] = {**profiles.get(name, {}), **ranges}
    return profiles


@dataclass
class _Conversation:
    conv_id: str
    turn: int
    context_tokens: int
    last_key: str
    last_tokens: int


def _check_ranges(path: str, profiles: dict[str, Any], filled: dict[str, Any]) -> None:
    """Every ``[low, high]`` of the options (each profile's, the turn and prefix lengths) has low <= high."""
    ranges_at = [(f"{path}.profiles.{name}.{field}", bounds) for name, profile in profiles.items()
                 for field, bounds in profile.items()]
    for section, field in (("multi_turn", "turn_tokens"), ("prefix_caching", "prefix_tokens")):
        ranges_at.append((f"{path}.{section}.{field}", filled[section][field]))
    for where, (low, high) in ranges_at:
        if low > high:
            raise SpecError(f"{where}: expected [low, high] with low <= high, got [{low}, {high}]")


class SyntheticSource(WorkloadSource):
    """Synthetic inference traffic shaped like the MLPerf KV-cache v3 reference."""

    name = "synthetic"
    options_schema: ClassVar[dict[str, Any]] = OPTIONS_SCHEMA

    def __init__(self, options: dict[str, Any], context: WorkloadContext) -> None:
        super().__init__(options, context)
        self.check_options(options)
        self.profiles = merged_profiles(self.options)
        mix = self.options.get("profile_mix") or {name: 1.0 for name in DEFAULT_PROFILES}
        self.profile_names = [name for name in mix if mix[name] > 0]
        weights = np.array([mix[name] for name in self.profile_names], dtype=float)
        self.profile_weights = weights / weights.sum()
        qos_mix = {name: self.options["qos_mix"][name] for name in DEFAULT_QOS_MIX}  # the draw's order is fixed
        self.qos_names = [name for name in qos_mix if qos_mix[name] > 0]
        qos_weights = np.array([qos_mix[name] for name in self.qos_names], dtype=float)
        self.qos_weights = qos_weights / qos_weights.sum()
        prefill_only = context.mode == "prefill-only"
        no_reads = prefill_only and self.options["no_reads"]
        # Copies: no_reads switches them off below, and self.options keeps what the spec and schema said.
        self.multi_turn = dict(self.options["multi_turn"])
        self.prefix = dict(self.options["prefix_caching"])
        self.rag = dict(self.options["rag"])
        if no_reads:
            self.multi_turn["enabled"] = self.prefix["enabled"] = self.rag["enabled"] = False
        arrival = self.options["arrival"]
        self.open_loop = arrival["process"] == "poisson"
        self.arrival_rate = float(arrival["rate"])
        self._arrival_rng = np.random.default_rng([context.seed, 0xA771])
        self._arrival_clock = 0.0
        self._users: dict[int, _UserState] = {}
        self._conversations: OrderedDict[int, _Conversation] = OrderedDict()
        self._prefix_prompts = self._make_prefix_prompts()

    @classmethod
    def check_options(cls, options: dict[str, Any], path: str = "workload.options") -> None:
        """What the JSON Schema cannot say: known profiles, non-zero mixes, ranges with low <= high.

        The spec validation calls this too, so ``kvbench spec validate`` reports these before a run.
        """
        filled = with_defaults(OPTIONS_SCHEMA, options)
        profiles = merged_profiles(options)
        for name in options.get("profiles") or {}:
            for field in ("context", "generate", "think_s"):
                if field not in profiles[name]:
                    raise SpecError(f"{path}.profiles.{name}.{field}: required field is missing "
                                    f"(a new profile needs context, generate and think_s)")
        _check_ranges(path, profiles, filled)
        mix = options.get("profile_mix")
        if mix is not None:
            unknown = sorted(set(mix) - set(profiles))
            if unknown:
                raise SpecError(f"{path}.profile_mix.{unknown[0]}: no such profile; "
                                f"known: {', '.join(sorted(profiles))}")
            if not any(weight > 0 for weight in mix.values()):
                raise SpecError(f"{path}.profile_mix: every weight is 0; give at least one profile a weight")
        if not any(weight > 0 for weight in filled["qos_mix"].values()):
            raise SpecError(f"{path}.qos_mix: every share is 0; give at least one QoS class a share")

    # -- set-up ----------------------------------------------------------------------------------------
    def _make_prefix_prompts(self) -> list[tuple[str, int]]:
        """(content hash, token count) per shared system prompt.  The count follows from the prompt's
        content, not the seed: clients of one run have their own seeds, and a shared tier must see one size
        for one key (issue 19: differing sizes of one key were a size mismatch in a shared Redis)."""
        low, high = self.prefix["prefix_tokens"]
        prompts = []
        for i in range(int(self.prefix["prompts"])):
            text = SYSTEM_PROMPTS[i % len(SYSTEM_PROMPTS)] + ("" if i < len(SYSTEM_PROMPTS) else f" #{i}")
            digest = hashlib.sha256(text.encode()).hexdigest()[:16]
            rng = np.random.default_rng([int(digest, 16), 0x5157])
            prompts.append((digest, int(rng.integers(low, high + 1))))
        return prompts

    @staticmethod
    def _prefix_key(digest: str, tokens: int) -> str:
        """The entry of a system prompt's first ``tokens`` tokens.  A prompt cut to a context shorter than it
        is another prefix (other tokens, other KV), so it is another entry: one key always means one size,
        and a read of the cut prompt hits only an earlier cut to the same length."""
        return f"kv_system_{digest}_t{tokens}"

    def _rag_keys(self) -> list[str]:
        return [f"rag_doc{d}_chunk{c}" for d in range(int(self.rag["documents"]))
                for c in range(int(self.rag["chunks_per_document"]))]

    def preload(self) -> Iterable[Write]:
        if self.rag["enabled"]:
            for key in self._rag_keys():
                yield Write(key, int(self.rag["chunk_tokens"]), "rag")
        if self.context.mode == "decode-only":
            for user_id in range(self.context.users):
                state = self._user(user_id)
                for i in range(DECODE_ONLY_ENTRIES_PER_USER):
                    yield Write(f"pre_u{user_id}_{i}", state.preload_tokens(i), "preload")

    def _user(self, user_id: int) -> _UserState:
        state = self._users.get(user_id)
        if state is None:
            rng = np.random.default_rng([self.context.seed, user_id])
            profile = self.profile_names[int(rng.choice(len(self.profile_names), p=self.profile_weights))]
            qos = self.qos_names[int(rng.choice(len(self.qos_names), p=self.qos_weights))]
            state = _UserState(user_id, profile, qos, self.profiles[profile], rng, self.context.seed)
            self._users[user_id] = state
        return state

    # -- requests --------------------------------------------------------------------------------------
    def next_request(self, user_id: int) -> Request | None:
        state = self._user(user_id)
        state.seq += 1
        arrival = self._next_arrival() if self.open_loop else None
        generate = state.sample("generate")
        think = state.sample_float("think_s")
        if self.context.mode == "decode-only":
            slot = int(state.rng.integers(0, DECODE_ONLY_ENTRIES_PER_USER))
            key = f"pre_u{user_id}_{slot}"
            return Request(user_id, state.seq, state.qos, state.preload_tokens(slot), generate,
                           decode_keys=(key,), phase=Phase.DECODE, arrival_s=arrival, think_s=think,
                           tags={"profile": state.profile})
        phase = Phase.PREFILL if self.context.mode == "prefill-only" else None
        reads: list[Read] = []
        tags: dict[str, Any] = {"profile": state.profile}
        conversation = self._continue_conversation(state)
        if conversation is not None:
            new_tokens = state.sample_range(self.multi_turn["turn_tokens"])
            reads.append(Read(conversation.last_key, conversation.last_tokens, "turn"))
            context = conversation.context_tokens + new_tokens
            key = f"{conversation.conv_id}_turn_{conversation.turn + 1}"
            write_tokens = context  # the whole grown context, not only the new tokens (see the module doc)
            decode_keys: tuple[str, ...] = ()  # ... so this turn's own entry is its whole KV
            conv_id = conversation.conv_id
            conversation.turn += 1
        else:
            context = state.sample_context()
            write_tokens = context
            prefix_tokens = 0
            if self.prefix["enabled"] and state.rng.random() < self.prefix["probability"]:
                digest, prompt_tokens = self._prefix_prompts[int(state.rng.integers(len(self._prefix_prompts)))]
                prefix_tokens = min(prompt_tokens, context - 1)
                prefix_key = self._prefix_key(digest, prefix_tokens)
                reads.append(Read(prefix_key, prefix_tokens, "prefix", on_miss=Write(prefix_key, prefix_tokens,
                                                                                      "prefix")))
                write_tokens = context - prefix_tokens
            if self.rag["enabled"] and state.rng.random() < self.rag["probability"]:
                rag_keys = self._rag_keys()
                chosen = state.rng.choice(len(rag_keys), size=min(int(self.rag["top_k"]), len(rag_keys)),
                                          replace=False)
                chunk = int(self.rag["chunk_tokens"])
                reads.extend(Read(rag_keys[i], chunk, "rag", on_miss=Write(rag_keys[i], chunk, "rag"))
                             for i in sorted(int(c) for c in chosen))
                context += chunk * len(chosen)
                tags["rag"] = True
            state.conversations += 1
            conv_id = f"u{user_id}_c{state.conversations}"
            key = f"{conv_id}_turn_1"
            conversation = _Conversation(conv_id, 1, context, key, write_tokens)
            # the context is the shared prefix + the RAG chunks + what this request writes: decode reads them all
            decode_keys = (*(read.key for read in reads), key) if reads else ()
        conversation.context_tokens = context
        conversation.last_key, conversation.last_tokens = key, write_tokens
        self._remember(state, conversation)
        return Request(user_id, state.seq, state.qos, context, generate, reads=tuple(reads),
                       write=Write(key, write_tokens), decode_keys=decode_keys, phase=phase, arrival_s=arrival,
                       think_s=think, conversation=conv_id, tags=tags)

    def _continue_conversation(self, state: _UserState) -> _Conversation | None:
        """The user's live conversation if it goes on for another turn, else None (start a new one)."""
        if not self.multi_turn["enabled"]:
            return None
        conversation = self._conversations.get(state.user_id)
        if conversation is None:
            return None
        ends = state.rng.random() < self.multi_turn["end_probability"]
        if ends or conversation.turn >= self.multi_turn["max_turns"]:
            del self._conversations[state.user_id]
            return None
        return conversation

    def _remember(self, state: _UserState, conversation: _Conversation) -> None:
        """Keep conversation metadata (never files) for a bounded number of live conversations."""
        if not self.multi_turn["enabled"]:
            return
        self._conversations[state.user_id] = conversation
        self._conversations.move_to_end(state.user_id)
        while len(self._conversations) > self.multi_turn["max_live_conversations"]:
            self._conversations.popitem(last=False)

    def _next_arrival(self) -> float:
        self._arrival_clock += float(self._arrival_rng.exponential(1.0 / self.arrival_rate))
        return self._arrival_clock

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.name,
            "arrival_process": f"poisson {self.arrival_rate}/s" if self.open_loop else "closed loop with think time",
            "profiles": {name: self.profiles[name] for name in self.profile_names},
            "profile_mix": dict(zip(self.profile_names, self.profile_weights.round(4).tolist(), strict=True)),
            "qos_mix": dict(zip(self.qos_names, self.qos_weights.round(4).tolist(), strict=True)),
            "multi_turn": self.multi_turn, "prefix_caching": self.prefix, "rag": self.rag,
        }


class _UserState:
    """Per-user RNG stream and profile."""

    def __init__(self, user_id: int, profile: str, qos: str, ranges: dict[str, list[float]],
                 rng: np.random.Generator, seed: int) -> None:
        self.user_id, self.profile, self.qos, self.ranges, self.rng = user_id, profile, qos, ranges, rng
        self.seed = seed
        self.seq = 0
        self.conversations = 0
        self._preload_tokens: dict[int, int] = {}

    def sample_range(self, bounds: list[float]) -> int:
        low, high = int(bounds[0]), int(bounds[1])
        return int(self.rng.integers(low, max(low, high) + 1))

    def sample(self, name: str) -> int:
        return self.sample_range(self.ranges[name])

    def sample_float(self, name: str) -> float:
        low, high = self.ranges[name]
        return float(self.rng.uniform(low, high))

    def sample_context(self) -> int:
        return self.sample("context")

    def preload_tokens(self, slot: int) -> int:
        """Size of a decode-only pre-populated entry: drawn once from a separate stream, so stable."""
        if slot not in self._preload_tokens:
            rng = np.random.default_rng([self.seed, self.user_id, slot, 0xDEC])
            low, high = (int(v) for v in self.ranges["context"])
            self._preload_tokens[slot] = int(rng.integers(low, high + 1))
        return self._preload_tokens[slot]
