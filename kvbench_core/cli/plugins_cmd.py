"""``kvbench plugins``: what is installed and what each plugin provides."""

from __future__ import annotations

import argparse
import json

from kvbench_core.plugins import installed_plugins


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("plugins", help="list installed plugins and what they provide")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    infos = installed_plugins()
    if args.json:
        print(json.dumps([info.__dict__ for info in infos], indent=2))
        return 0
    for info in infos:
        provided = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in info.provides.items() if names)
        print(f"{info.distribution} {info.version} [{info.name}]  {provided}")
    return 0
