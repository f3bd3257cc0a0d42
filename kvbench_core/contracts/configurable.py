"""What every plugin class shares: a name, an options schema with its defaults, optional dependencies and a
check of what the schema cannot say.

Storage backends, workload sources, autoscalers and codecs are all configured the same way, from a spec's
``options`` mapping: the core composes each class's ``options_schema`` into the run-spec schema, asks
``check_options`` once per spec, checks ``requires`` when the class is selected, and builds the class with
the options as written.  One base holds that pattern once (it was written out four times, with
``check_options`` a classmethod in two bases and a staticmethod in a third).
"""

from __future__ import annotations

from typing import Any, ClassVar

from kvbench_core.contracts.validation import with_defaults


class Configurable:
    """A plugin class built from a spec's ``options``."""

    #: The name a spec selects it by (``cache.tiers[i].backend``, ``workload.source``, ...).
    name: ClassVar[str] = ""
    #: JSON Schema fragment for its ``options``, validated at the spec boundary; defaults live here, once.
    options_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False}
    #: Optional heavy imports it needs: import name -> install hint, checked when a spec selects it.
    requires: ClassVar[dict[str, str]] = {}

    def __init__(self, options: dict[str, Any]) -> None:
        # Defaults live once, in ``options_schema``: a subclass reads ``self.options["key"]``, never
        # ``options.get("key", <a second copy of the default>)``, and a class built outside a spec
        # (a bench script, a test) holds the values a validated spec would give it.
        self.options = with_defaults(type(self).options_schema, options)

    @classmethod
    def check_options(cls, options: dict[str, Any], path: str = "options") -> None:
        """Refuse what ``options_schema`` cannot say (a size's range, options that exclude each other), with
        a ``SpecError`` naming the field under ``path`` (``cache.tiers[1].options``, so errors read
        ``cache.tiers[1].options.transfer_size: ...`` as the schema's do), without building the class.
        ``options`` are the options as the spec wrote them, validated against the schema:
        ``with_defaults`` gives the values the class will use, and a rule about options given together
        judges the keys written.  Spec validation calls it once, so ``kvbench spec validate`` and ``run``
        refuse a bad choice before anything is built or written.  The default checks nothing."""
