"""One draft forward of a batch of 8 in which row 0 catches up its 380-token prompt and rows 1-2
feed one token each (the others none), with attention over the padded block and row by row
(decoder.ragged_attention). Run: python catchup_forward.py"""

import time, torch, dynaspec
from dynaspec.backends.static_batch import StaticBatchAdapter
from dynaspec.backends import decoder

pair = dynaspec.load_pair("qwen2.5-coder", static=True, draft_quantize="int8")
draft = pair.draft
torch.manual_seed(0)
rows = 8
prompts = [torch.randint(100, 20000, (380 + 3 * i,)) for i in range(rows)]


def run(ragged_on: bool):
    a = StaticBatchAdapter(draft)
    width = max(p.numel() for p in prompts)
    ids = torch.zeros(rows, width, dtype=torch.long)
    mask = torch.zeros(rows, width, dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, width - p.numel() :] = p
        mask[r, width - p.numel() :] = 1
    a.begin(ids, mask)
    # rows 1..7 caught up, row 0 not: feed rows 1..7 their prompts first
    fed = [torch.empty(0, dtype=torch.long)] + [ids[r] for r in range(1, rows)]
    a.forward(fed, [1] * rows)
    orig = a._packing
    if not ragged_on:
        from dataclasses import replace

        a._packing = lambda *args: (
            lambda p: None if p is None else replace(p, sizes=(), attend=())
        )(orig(*args))
    t = time.perf_counter()
    a.forward(
        [ids[0]] + [torch.tensor([5])] * 2 + [torch.empty(0, dtype=torch.long)] * (rows - 3),
        [1] * rows,
    )
    return time.perf_counter() - t


for i in range(2):
    print("padded attention", round(run(False), 2), "s; ragged", round(run(True), 2), "s")
