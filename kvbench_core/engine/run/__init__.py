"""Driving a run: building its parts from the plan, the schedule of requests (closed loop, arrivals,
autoscalers), the workers that execute them through the cache, the warm-up/window/drain phases and the
dry run.  The engine's top room: it may import ``engine.cache`` and ``engine.measure``."""
