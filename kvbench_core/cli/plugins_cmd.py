"""``kvbench plugins``: what is installed and what each plugin provides.

``kvbench plugins --conformance NAME --options '{...}'`` runs every check of the
backend conformance suite (``kvbench_core.contracts.conformance``), with quick
sizes, against one configured tier, so a vendor or an operator can vet a tier on
the target machine without pytest.  It writes and deletes a few small entries
under a unique run id.  The cleanup check reopens the tier's namespace to see
that nothing survived ``close()`` (``reopen_probe``); the dead-endpoint check
needs ``--dead-options`` (the same tier pointed at an endpoint that is down) and
says so when they are not given, as every skipped check says why.  (``--check`` was
this flag's name; "check" is now only ``kvbench check``, a result against rules.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from kvbench_core.cli.renamed import RenamedFlag
from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.plugins import installed_plugins


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plugins", help="list installed plugins and what they provide; --conformance vets one storage tier")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--conformance", metavar="BACKEND",
                        help="run the quick conformance checks against this storage backend")
    parser.add_argument("--check", dest="conformance", metavar="BACKEND", action=RenamedFlag, new="--conformance",
                        help=argparse.SUPPRESS)
    parser.add_argument("--options", metavar="JSON|YAML|FILE", default="{}",
                        help="the tier's options for --conformance, inline JSON/YAML or a file holding them")
    parser.add_argument("--dead-options", metavar="JSON|YAML|FILE",
                        help="for the dead-endpoint conformance check: the tier's options pointed at an endpoint that "
                             "is down (a closed port, a missing mount); open() must fail with BackendUnavailable")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.conformance:
        dead = parse_options(args.dead_options, "--dead-options") if args.dead_options else None
        return run_conformance(args.conformance, parse_options(args.options), as_json=args.json, dead_options=dead)
    infos = installed_plugins()
    if args.json:
        print(json.dumps([info.__dict__ for info in infos], indent=2))
        return 0
    for info in infos:
        provided = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in info.provides.items() if names)
        print(f"{info.distribution} {info.version} [{info.name}]  {provided}")
    return 0


def parse_options(text: str, source: str = "--options") -> dict[str, Any]:
    """Options from inline JSON/YAML (JSON is YAML) or from a file of either."""
    path = Path(text)
    if not text.lstrip().startswith(("{", "[")) and path.is_file():
        text, source = path.read_text(), str(path)
    try:
        options = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise SpecError(f"{source}: not valid JSON or YAML: {error}") from None
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise SpecError(f"{source}: expected a mapping of option names to values, got {type(options).__name__}")
    return options


def run_conformance(name: str, options: dict[str, Any], *, as_json: bool,
                  dead_options: dict[str, Any] | None = None) -> int:
    """Select and open the tier once (errors there are one clear line), then run every check."""
    from kvbench_core.contracts.conformance import BackendHarness, CheckSkipped, reopen_probe, run_checks
    from kvbench_core.engine.factory import create_backend

    def factory_for(tier_options: dict[str, Any], flag: str) -> Any:
        """Errors name the flag the options were written in (``--options.size: ...``)."""
        tier = {"name": "check", "backend": name, "options": tier_options}
        return lambda context: create_backend(tier, context, path="--conformance", options_path=flag)

    factory = factory_for(options, "--options")

    def dead(context: BackendContext) -> StorageBackend:
        if dead_options is None:
            raise CheckSkipped("no --dead-options given: pass this tier's options pointed at an endpoint that is "
                               "down to check that open() fails with BackendUnavailable")
        return factory_for(dead_options, "--dead-options")(context)

    harness = BackendHarness(factory=factory, remaining_entries=reopen_probe(factory), dead_factory=dead, quick=True)
    with harness.opened():  # selection and open errors surface here as UserError, before any check
        pass
    results = run_checks(harness)
    failed = [result for result in results if result.status == "fail"]
    if as_json:
        print(json.dumps({"backend": name, "passed": not failed,
                          "checks": [result.__dict__ for result in results]}, indent=2))
    else:
        width = max(len(result.name) for result in results)
        for result in results:
            print(f"{result.status.upper():4}  {result.name:<{width}}  {result.detail}")
        counts = {status: sum(result.status == status for result in results) for status in ("pass", "fail", "skip")}
        print(f"{name}: {counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped")
    return 1 if failed else 0
