"""Finding NIXL, and the few agent calls the tier makes, with NIXL's errors turned into ``OSError``.

NIXL ships as per-CUDA wheels whose import names differ (``nixl_cu12``,
``nixl_cu13``; the ``nixl`` meta-package re-exports one of them), so the tier
looks for all three.  Nothing here imports NIXL at module import time:
``kvbench plugins`` and spec validation must work without the 235 MB wheel.

Completion.  NIXL transfers are asynchronous: ``transfer`` posts a request,
``check_xfer_state`` polls it.  A busy poll would burn one of the host's
cores per thread in flight (on a 2-core machine it measured 19 490 polls for
one 2 MiB S3 PUT), so ``Agent.run`` backs off from 10 µs doubling to
``MAX_POLL_S``; the device time it reports therefore includes at most that
much detection latency per request.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

INSTALL_HINT = ("pip install 'kvbench-nixl[nixl]'  (the nixl-cu12 wheel; install torch first, e.g. "
                "'kvbench-core[gpu]', so pip keeps that torch build)")
#: Import names of the NIXL wheels, tried in this order, with the distribution that provides each.
MODULES = {"nixl_cu12": "nixl-cu12", "nixl_cu13": "nixl-cu13", "nixl": "nixl"}
#: Longest sleep between two completion polls of one request.
MAX_POLL_S = 200e-6
#: NIXL's thread-sync mode for the agent (see ``Agent``).
SYNC_MODE = "NIXL_THREAD_SYNC_STRICT"


def installed_module() -> str | None:
    """The import name of an installed NIXL wheel, or None (no import: find_spec only)."""
    for name in MODULES:
        if importlib.util.find_spec(name) is not None:
            return name
    return None


class NixlRequirements:
    """The backend's ``requires``: empty when any NIXL wheel is installed, else the hint for nixl-cu12.

    A descriptor so the lookup happens when the tier is *selected*, and so any of
    the wheels' import names satisfies it (``requires`` names one module).
    """

    def __get__(self, instance: object, owner: type) -> dict[str, str]:
        return {} if installed_module() is not None else {"nixl_cu12": INSTALL_HINT}


@dataclass(frozen=True)
class Library:
    """The imported NIXL Python API and what the declaration says about it."""

    module: ModuleType
    distribution: str
    version: str
    errors: tuple[type[BaseException], ...]  # every exception class of NIXL's bindings


def load() -> Library:
    """Import NIXL; ``ImportError`` (with the install hint) when no wheel imports.

    NIXL logs at INFO to stdout by default, which would interleave with kvbench's
    own output; ``NIXL_LOG_LEVEL`` is set to WARN unless the user chose a level.
    """
    os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")
    problems = []
    for name, distribution in MODULES.items():
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            problems.append(f"{name}: {error}")
            continue
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        bindings = getattr(module, "_bindings", None) or getattr(getattr(module, "_api", None), "nixlBind", None)
        errors = tuple(value for key, value in vars(bindings or ModuleType("none")).items()
                       if key.startswith("nixl") and isinstance(value, type) and issubclass(value, Exception))
        return Library(module, distribution, version, errors)
    raise ImportError(f"NIXL is not installed ({'; '.join(problems)}): {INSTALL_HINT}")


class Agent:
    """One NIXL agent with one backend instantiated; the calls the tier's data path makes.

    The agent runs in NIXL's STRICT thread-sync mode: the cache calls the tier
    from many threads, and NIXL's registration maps are not thread-safe otherwise.
    """

    def __init__(self, library: Library, name: str, backend: str, params: dict[str, str]) -> None:
        nixl = library.module
        self.library = library
        self.backend = backend
        config = nixl.nixl_agent_config(backends=[], sync_mode=getattr(nixl.nixl_thread_sync_t, SYNC_MODE))
        self.agent = nixl.nixl_agent(name, config)
        self.name = name
        self.plugins: list[str] = list(self.agent.get_plugin_list())
        if backend not in self.plugins:
            raise LookupError(f"this NIXL build has no {backend} plugin (it has {', '.join(self.plugins)})")
        self.agent.create_backend(backend, params)
        self.memory_types: list[str] = list(self.agent.get_backend_mem_types(backend))

    def plugin_params(self) -> dict[str, str]:
        """The init parameters the plugin declares, with their defaults (empty when it declares none)."""
        return dict(self.agent.get_plugin_params(self.backend))

    def register(self, descriptors: list[tuple[int, int, int, str]], memory: str) -> Any:
        """Register memory or storage (``(addr, len, dev_id, meta)`` tuples) with this backend."""
        return self.agent.register_memory(descriptors, memory, backends=[self.backend])

    def deregister(self, registration: Any) -> None:
        self.agent.deregister_memory(registration, backends=[self.backend])

    def prepare(self, operation: str, local: list[tuple[int, int, int]], local_memory: str,
                remote: list[tuple[int, int, int]], remote_memory: str) -> Any:
        """A transfer request (``operation`` "WRITE" or "READ") between local and remote descriptors."""
        local_list = self.agent.get_xfer_descs(local, local_memory)
        remote_list = self.agent.get_xfer_descs(remote, remote_memory)
        return self.agent.initialize_xfer(operation, local_list, remote_list, self.name, backends=[self.backend])

    def run(self, request: Any) -> None:
        """Post ``request`` and return once NIXL reports it done; ``OSError`` when it reports an error."""
        state = self.agent.transfer(request)
        delay = 0.0
        while state == "PROC":
            if delay:
                time.sleep(delay)
            state = self.agent.check_xfer_state(request)
            delay = min(MAX_POLL_S, delay * 2 or 10e-6)
        if state != "DONE":
            raise OSError(f"NIXL {self.backend} transfer ended in state {state}")

    def release(self, request: Any) -> None:
        self.agent.release_xfer_handle(request)
