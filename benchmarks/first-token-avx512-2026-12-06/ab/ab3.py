"""This folder's A/Bs: benchmarks/borrow-avx512-2026-12-05/ab/ab3.py run with this folder's
variants.py.

    python ab3.py VARIANTS REPS task:seed:prompt ...
"""

import runpy
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))  # `import variants` finds this folder's
runpy.run_path(str(here.parents[1] / "borrow-avx512-2026-12-05/ab/ab3.py"), run_name="__main__")
