# probe: the w4a8 draft's one-token step, eager against torch.compile with the C kernels as
# custom ops (no graph breaks); layer scope and model scope
import sys, time, torch
from typing import Optional
from torch.library import custom_op
from dynaspec import load_pair
from dynaspec.backends import w4a8_kernel, attention_kernel, decoder as D
from dynaspec.backends.kernel_build import packed_matmul
from dynaspec.backends.static import causal_mask

@custom_op("probe::w4a8", mutates_args=())
def w4a8_op(rows: torch.Tensor, codes: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    return packed_matmul(w4a8_kernel.KERNEL, rows.to(torch.bfloat16).contiguous(), codes, bias, torch.bfloat16)
@w4a8_op.register_fake
def _(rows, codes, bias):
    return rows.new_empty(rows.shape[0], codes.shape[0] * 64, dtype=torch.bfloat16)
orig_attend = attention_kernel.attend.__wrapped__ if hasattr(attention_kernel.attend, "__wrapped__") else None
@custom_op("probe::attend", mutates_args=())
def attend_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scaling: float) -> torch.Tensor:
    return attention_kernel.attend(q, k, v, mask, scaling)
@attend_op.register_fake
def _(q, k, v, mask, scaling):
    return q.new_empty(q.shape[0], q.shape[2], q.shape[1] * q.shape[3])

pair = load_pair("qwen2.5-coder", draft_quantize="w4a8")
dm = pair.draft
dec = dm.decoder
ids = torch.randint(100, 20000, (1, 300))
dm.begin(ids, max_length=600); dm.forward(ids[0], 1)
start = dm.num_cached
tok = torch.tensor([[123]])
positions = torch.tensor([[start]])
mask = causal_mask(positions, start + 1, dm._capacity)
args = (tok, positions, mask, dm._cos, dm._sin, dm._cache)
def timeit(f, n=100):
    for _ in range(5): f()
    t = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - t) / n * 1e3
with torch.inference_mode():
    ref = dec.hidden(*args)
    eager = timeit(lambda: dec.hidden(*args))
print(f"eager hidden step: {eager:.2f} ms", flush=True)
# route the kernels through the custom ops
w4a8_kernel.matmul = lambda rows, codes, group, bias, out_dtype=torch.float32: w4a8_op(rows, codes, bias).to(out_dtype)
import dynaspec.backends.quant as Q
D.attention_kernel = type("A", (), {"supports": staticmethod(attention_kernel.supports), "attend": staticmethod(attend_op)})
with torch.inference_mode():
    same = dec.hidden(*args)
    print("custom ops eager equal:", torch.equal(same, ref), f"{timeit(lambda: dec.hidden(*args)):.2f} ms", flush=True)
scope = sys.argv[1] if len(sys.argv) > 1 else "layer"
from functools import partial
if scope == "layer":
    fn = partial(dec.hidden, block_fn=torch.compile(D.run_block, dynamic=False))
else:
    fn = torch.compile(dec.hidden, dynamic=False)
with torch.inference_mode():
    t = time.perf_counter(); out = fn(*args); print(f"compile ({scope}): {time.perf_counter() - t:.1f} s", flush=True)
    print("compiled equal:", torch.equal(out, ref), "max diff", float((out.float() - ref.float()).abs().max()))
    print(f"compiled hidden step ({scope}): {timeit(lambda: fn(*args)):.2f} ms", flush=True)
