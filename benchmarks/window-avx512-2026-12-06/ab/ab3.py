"""This folder's A/Bs: the borrow folder's ab3.py with this folder's variants."""

import runpy
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
import variants  # noqa: E402,F401  (patches before the script imports dynaspec's drafters)

runpy.run_path(str(here.parents[1] / "borrow-avx512-2026-12-05" / "ab" / "ab3.py"), run_name="__main__")
