"""Entry point module (``[project.entry-points.kvbench] template = "kvbench_template.plugin"``).

kvbench loads this module through pluggy and calls the hooks it implements.
Import your backend inside the hook: ``kvbench plugins`` then stays fast and
works even where your tier's heavy dependencies are not installed.
"""

from __future__ import annotations

from kvbench_core.contracts.plugins import hookimpl


@hookimpl
def kvbench_storage_backends() -> dict[str, type]:
    from kvbench_template.backend import TemplateMemoryBackend

    return {TemplateMemoryBackend.name: TemplateMemoryBackend}
