"""The earlier offline oracle (../quote-bound-avx512-2026-12-06/oracle_hybrid.py: the best any
policy could do with this draft and copies, knowing how far each source agrees with the
target's output, forwards priced by the fitted line) on every recorded quote summary, the
unseen sets of seeds 31-37 included:

    python oracle_all.py
"""

import runpy
import sys
from pathlib import Path

bench = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(bench / "prefill-rows-avx512-2026-12-06" / "offline"))
import look  # noqa: E402

look.RUNS = (
    *look.RUNS,
    "unseen-avx512-2026-12-06/ge*",
    "unseen-step-avx512-2026-12-06/ge*",
    "unseen-final-avx512-2026-12-06/ge*",
)
sys.argv = [sys.argv[0], "lee"]
runpy.run_path(
    str(bench / "quote-bound-avx512-2026-12-06" / "oracle_hybrid.py"), run_name="__main__"
)
