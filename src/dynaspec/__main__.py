"""`python -m dynaspec` runs the command line."""

import sys

from dynaspec.cli import main

sys.exit(main())
