"""Variants for this folder's A/Bs: how much of the prompt the draft model reads.

- code: dynaspec as committed (the draft reads every committed token).
- window: the draft reads the prompt's first SINK tokens and its last WINDOW tokens only
  (as StreamingLLM-style drafts do in MagicDec and TriForce); tokens from its start on it
  reads whole. A draft never changes the output; this changes what it costs to start.
"""

import torch

from dynaspec.drafters import draft_model as D

SINK, WINDOW = 48, 128
_active = {"name": "code"}
_orig = {n: getattr(D.ModelDrafter, n) for n in ("begin", "catchup", "draft", "crop")}


def _skip(self, num_committed):
    if getattr(self, "_skip", None) is None:
        if self.model.num_cached > 0 or _active["name"] != "window":
            self._skip = 0
        else:
            self._skip = max(num_committed - 1 - SINK - WINDOW, 0)
    return self._skip


def begin(self, input_ids, max_length=None):
    self._skip = None
    _orig["begin"](self, input_ids, max_length)


def catchup(self, num_committed):
    return num_committed - _skip(self, num_committed) - self.model.num_cached


def draft(self, tokens, *args, **kwargs):
    skip = _skip(self, tokens.numel())
    if skip:
        tokens = torch.cat([tokens[:SINK], tokens[SINK + skip :]])
    return _orig["draft"](self, tokens, *args, **kwargs)


def crop(self, num_committed):
    self.model.crop(min(self.model.num_cached, num_committed - (self._skip or 0)))


D.ModelDrafter.begin = begin
D.ModelDrafter.catchup = catchup
D.ModelDrafter.draft = draft
D.ModelDrafter.crop = crop


def use(name: str) -> None:
    _active["name"] = name
