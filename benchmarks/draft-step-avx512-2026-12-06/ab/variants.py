"""Variants for this folder's A/Bs: whether a w4a8 draft's one-token forwards take the
few-call step (backends/token_step.py).

- step: dynaspec as committed.
- layers: every forward layer by layer (dynaspec before the change).
"""

from dynaspec.backends import static

_forward = static.StaticAdapter.forward
_active = {"name": "step"}


def _variant(self, new_tokens, num_logits):
    step = self._step
    if _active["name"] == "layers":
        self._step = None
    try:
        return _forward(self, new_tokens, num_logits)
    finally:
        self._step = step


static.StaticAdapter.forward = _variant


def use(name: str) -> None:
    _active["name"] = name if name in ("step", "layers") else "step"
