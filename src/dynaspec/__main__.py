"""`python -m dynaspec` and the `dynaspec` command: the command line (dynaspec/cli.py).

The command line is imported inside `main`, so that Ctrl-C while torch and transformers load
(the first seconds) ends in one line and exit code 130, as it does later.
"""

import importlib
import sys


def main() -> int:
    try:
        cli = importlib.import_module("dynaspec.cli")
        return int(cli.main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
