"""``python -m kvbench_trace --pid PID --path DIR``: print the bpftrace program kvbench would run.

For tracing another process (an inference engine, fio) the same way a traced
kvbench run does, and for reproducing the checked-in test capture; run it with
``bpftrace -e "$(python -m kvbench_trace ...)"`` as root and stop it with Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys

from kvbench_trace.devices import DeviceNotTraceable, devices_for
from kvbench_trace.program import build_program


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvbench_trace", description=__doc__.splitlines()[0])
    parser.add_argument("--pid", type=int, required=True, help="process whose file syscalls are traced")
    parser.add_argument("--path", required=True, help="directory whose disk's block requests are traced")
    args = parser.parse_args(argv)
    try:
        devices = devices_for(args.path)
    except (OSError, DeviceNotTraceable) as error:
        print(f"kvbench_trace: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(build_program(args.pid, devices))
    return 0


if __name__ == "__main__":
    sys.exit(main())
