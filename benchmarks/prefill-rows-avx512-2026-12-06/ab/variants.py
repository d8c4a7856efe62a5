"""Variants for this folder's A/Bs: whether a long bf16 forward is padded to a multiple of
4 rows (backends/gemm_rows.py).

- code: dynaspec as committed (padded).
- nopad: every forward fed as it is (dynaspec before the change).
"""

from dynaspec.backends import gemm_rows, hf

_fed_rows = gemm_rows.fed_rows
_active = {"name": "code"}


def _variant(num_tokens, dtype, device):
    if _active["name"] == "nopad":
        return num_tokens
    return _fed_rows(num_tokens, dtype, device)


hf.fed_rows = _variant


def use(name: str) -> None:
    _active["name"] = name
