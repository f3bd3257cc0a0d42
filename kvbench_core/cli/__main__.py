import sys

from kvbench_core.cli import main

sys.exit(main())
