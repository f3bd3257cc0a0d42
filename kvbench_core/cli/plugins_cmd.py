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
import dataclasses
import json
from pathlib import Path
from typing import Any

from kvbench_core.cli.renamed import RenamedFlag
from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.plugins import installed_plugins, lookup
from kvbench_core.contracts.validation import schema_errors
from kvbench_core.runspec.loader import check_tier_directory
from kvbench_core.runspec.reading import parse_or_refuse


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
    """Options from inline JSON/YAML (JSON is YAML) or from a file of either, read as strictly as a spec
    (duplicate keys refused, the alias budget); a malformed one is one line, as a spec's is."""
    path = Path(text)
    if not text.lstrip().startswith(("{", "[")) and path.is_file():
        try:
            text, source = path.read_text(), str(path)
        except (OSError, UnicodeDecodeError) as error:
            raise SpecError(f"{source}: cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    options = parse_or_refuse(text, source, "not valid JSON or YAML")
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise SpecError(f"{source}: expected a mapping of option names to values, got {type(options).__name__}")
    return options


def check_flag_options(cls: type[StorageBackend], options: dict[str, Any], flag: str) -> None:
    """The options a flag gives, judged as a spec's tier options are, before anything is created: every
    schema error on one line (these are not a spec), the tier's directory never the OS or a home directory
    (``--options.path: /etc/kvb is inside a system directory``, exit 2, as a spec is refused)."""
    messages = schema_errors(options, cls.options_schema, root=flag)
    if messages:
        raise SpecError("; ".join(messages))
    directory = options.get(cls.directory_option) if cls.directory_option else None
    if isinstance(directory, str):
        check_tier_directory(f"{flag}.{cls.directory_option}", directory)


def run_conformance(name: str, options: dict[str, Any], *, as_json: bool,
                  dead_options: dict[str, Any] | None = None) -> int:
    """Select the backend and check its options (errors there name the flag: ``--conformance``,
    ``--options.x``), open the tier once (errors there name ``--conformance NAME``), then run every check."""
    from kvbench_core.contracts.conformance import BackendHarness, CheckSkipped, reopen_probe, run_checks
    from kvbench_core.engine.run.factory import create_backend

    cls = lookup("backend", name, path="--conformance")
    check_flag_options(cls, options, "--options")
    if dead_options is not None:
        check_flag_options(cls, dead_options, "--dead-options")

    def factory_for(tier_options: dict[str, Any], flag: str) -> Any:
        """Errors name the flag the options were written in (``--options.size: ...``) or the backend as the
        command line chose it (``--conformance redis: cannot use the server at ...``)."""
        tier = {"name": "check", "backend": name, "options": tier_options}
        return lambda context: create_backend(tier, dataclasses.replace(context, named_as=f"--conformance {name}"),
                                              path="--conformance", options_path=flag)

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
