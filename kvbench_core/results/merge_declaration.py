"""The declaration of a merged multi-client result: what each client detected, merged as the run saw it.

A merged result used to carry client 0's declaration, so a run whose second client opened its window on
a cold cache was declared ``steady``, and the working set was one client's (R1 M4).  What can be merged
exactly is merged here; the rest stays client 0's (``clients[]`` keeps each client's metrics and workload,
from which these fields come, not a declaration of its own):

- ``tiers.cache_state``: the least advanced any client reports (cold < warm < steady): the run as a whole
  is only as steady as its coldest client;
- ``tiers.working_set_vs_tier``: ``stored_bytes`` summed over the clients; ``multiple_of_capacity`` per
  tier the largest any client reports, since each client runs against its own tier of that capacity
  (``<tier path>/client<i>``), so the most oversubscribed client is the one that says whether a tier
  holds its working set;
- ``workload.input_length_mean``: the mean over every served request (the merged workload statistics);
- ``workload.input_length_p99``: null, as ``workload.stats.input_length.p99`` is: sample percentiles do not
  merge, and client 0's beside a mean over every client would describe a different set of requests;
- ``workload.prefix_reuse_rate``: recomputed from the summed cache counters.
"""

from __future__ import annotations

import copy
from typing import Any

from kvbench_core.engine.cache.cache_figures import reuse_rate

CACHE_STATES = ("cold", "warm", "steady")  # least advanced first


def merge_declarations(declarations: list[dict[str, Any]], *, workload: dict[str, Any],
                       counters: dict[str, int]) -> dict[str, Any]:
    """Client 0's declaration with the fields above merged over every client that reported one."""
    merged = copy.deepcopy(declarations[0])
    tiers = merged.get("tiers") or {}
    states = [_value(d, "tiers", "cache_state") for d in declarations]
    if "cache_state" in tiers and all(state in CACHE_STATES for state in states):
        tiers["cache_state"]["value"] = min(states, key=CACHE_STATES.index)
    if "working_set_vs_tier" in tiers:
        tiers["working_set_vs_tier"]["value"] = _working_set([_value(d, "tiers", "working_set_vs_tier")
                                                              for d in declarations])
    section = merged.get("workload") or {}
    if "input_length_mean" in section:
        section["input_length_mean"]["value"] = workload["stats"]["input_length"]["mean"]
    if "input_length_p99" in section:
        section["input_length_p99"]["value"] = workload["stats"]["input_length"]["p99"]
    if "prefix_reuse_rate" in section:
        section["prefix_reuse_rate"]["value"] = reuse_rate(counters)
    return merged


def _value(declaration: dict[str, Any], group: str, name: str) -> Any:
    return ((declaration.get(group) or {}).get(name) or {}).get("value")


def _working_set(values: list[Any]) -> dict[str, Any] | None:
    sets = [value for value in values if isinstance(value, dict)]
    if not sets:
        return None
    tiers = dict.fromkeys(name for value in sets for name in value.get("multiple_of_capacity") or {})
    return {"stored_bytes": sum(value["stored_bytes"] for value in sets),
            "multiple_of_capacity": {name: max((value.get("multiple_of_capacity") or {}).get(name, 0.0)
                                               for value in sets) for name in tiers}}
