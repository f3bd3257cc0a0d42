"""``max users within SLA`` at a forecast's configuration: ``kvbench capacity``'s search over simulated runs.

The same doubling-then-bisection (``capacity/search.py``) and the same judgement of a load (every class's
service p95 within its SLA, its p99 too from 100 requests, a class with fewer than 20 requests not judged
and so over), each load a whole simulated window at that many users.  A load the model refuses (too far past
the measured concurrency) ends the search there, and the answer says it is a lower bound.
"""

from __future__ import annotations

from typing import Any

from kvbench_core.capacity.search import Bisection
from kvbench_core.contracts.errors import ForecastRefused
from kvbench_core.forecast.forecast import Forecaster


def max_users_within_sla(forecaster: Forecaster, sets: list[str], tiers: list[str], clients: int | None,
                         start: int, *, ceiling: int, resolution: float = 0.05) -> dict[str, Any]:
    """The highest simulated load within every SLA, with its steps (users, sla_met, each class's p95)."""
    search = Bisection(start=start, ceiling=ceiling, resolution=resolution)
    steps: list[dict[str, Any]] = []
    refused = None
    load: int | None = start
    while load is not None:
        try:
            figures = forecaster.forecast([*sets, f"workload.users={load}"], tiers, clients)
        except ForecastRefused as error:
            refused = str(error)
            break
        within = bool(figures["sla_met"])
        steps.append({"users": load, "sla_met": within, "requests": figures["requests_completed"],
                      "service_p95_ms": {name: q["service_p95_ms"] for name, q in figures["qos"].items()}})
        load = search.next(load, within)
    return {"max_users_within_sla": search.lo, "bracket": search.bracket(),
            "at_least": search.hi is None, "refused": refused, "steps": steps}
