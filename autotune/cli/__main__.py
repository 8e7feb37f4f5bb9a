"""`python -m autotune.cli` runs the command line."""

import sys

from autotune.cli.main import main

sys.exit(main())
