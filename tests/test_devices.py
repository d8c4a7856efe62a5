"""Device placement: tokens go to each model's device, each device draws from its own seeded
generator, `device=` places loaded models. The CPU tests use the meta device (tensors with a
device and no data) as "a model elsewhere"; tests marked `cuda` put draft and target on
different real devices and are skipped without a GPU."""

from __future__ import annotations

from copy import deepcopy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tiny_models import CUDA, hf_greedy, noisy_copy, random_prompts, tiny_model

import dynaspec
from dynaspec.backends.hf import HFAdapter
from dynaspec.compat.records import SamplingConfig
from dynaspec.core.sampling import TokenSampler
from dynaspec.errors import ConfigError
from dynaspec.models import loading
from dynaspec.models.devices import resolve_device
from dynaspec.models.tiny import byte_tokenizer


class _Cache:
    """The smallest rollback cache: a token count."""

    def __init__(self) -> None:
        self.length = 0

    def crop(self, length: int) -> None:
        self.length = self.length + length if length < 0 else length


class RecordingModel(torch.nn.Module):
    """A fake causal LM whose weights live on `device`; records its inputs' devices."""

    def __init__(self, device: str, vocab_size: int = 8) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1, device=device))
        self.config = SimpleNamespace(vocab_size=vocab_size, max_position_embeddings=64)
        self.vocab_size = vocab_size
        self.input_devices: list[torch.device] = []

    def forward(self, input_ids, past_key_values=None, use_cache=True, logits_to_keep=1):  # noqa: ANN001, ANN201
        self.input_devices.append(input_ids.device)
        cache = past_key_values or _Cache()
        cache.length += input_ids.shape[1]
        logits = torch.zeros(1, input_ids.shape[1], self.vocab_size)  # (1, n, V), finite
        return SimpleNamespace(logits=logits, past_key_values=cache)


def test_cpu_tokens_move_to_the_models_device() -> None:
    model = RecordingModel("meta")
    adapter = HFAdapter(model)
    first = adapter.begin(torch.tensor([[1, 2, 3]]))
    assert first.device.type == "meta"  # the prompt went to the model
    adapter.forward(torch.tensor([1, 2, 3]), 1)  # CPU tokens, as a draft on another device
    adapter.forward(torch.tensor([4]), 1)
    assert [device.type for device in model.input_devices] == ["meta", "meta"]
    adapter.crop(2)
    assert adapter.num_cached == 2 and adapter.cache.length == 2


def test_one_device_one_stream_seeded_with_seed() -> None:
    sampler = TokenSampler(SamplingConfig(do_sample=True, seed=5), device="cpu")
    generator = sampler.generator("cpu")
    assert generator is sampler.generator(torch.device("cpu"))  # draft and target share it
    expected = torch.rand(4, generator=torch.Generator().manual_seed(5))
    assert torch.equal(sampler.uniform(4, "cpu"), expected)
    assert TokenSampler(SamplingConfig(do_sample=True), device="cpu").generator("cpu") is None


def test_a_second_device_draws_another_stream() -> None:
    """Home on meta (no generator made there): the CPU stream is seeded differently."""
    sampler = TokenSampler(SamplingConfig(do_sample=True, seed=5), device="meta")
    draws = sampler.uniform(4, "cpu")
    assert not torch.equal(draws, torch.rand(4, generator=torch.Generator().manual_seed(5)))
    again = TokenSampler(SamplingConfig(do_sample=True, seed=5), device="meta")
    assert torch.equal(again.uniform(4, "cpu"), draws)  # still seeded: reproducible


def test_resolve_device_names_the_fix() -> None:
    assert resolve_device(None) is None
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match="device='cpu'"):
        resolve_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CPU-only build|torch sees no CUDA GPU"):
            resolve_device("cuda")
    else:
        with pytest.raises(ConfigError, match="numbered 0"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")


def test_load_model_places_the_model(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    tiny_model("llama", vocab_size=len(byte_tokenizer())).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    model, _ = loading.load_model(folder, dtype="float32", device="meta")
    assert {param.device.type for param in model.parameters()} == {"meta"}
    model, _ = loading.load_model(folder, dtype="float32")
    assert {param.device.type for param in model.parameters()} == {"cpu"}
    with pytest.raises(ConfigError, match="unknown device"):
        loading.load_model(folder, device="gpu")


# (target, draft, prompt) devices; the all-CPU case is test_equality's.
PLACEMENTS = [
    ("cuda", "cuda", "cpu"),
    ("cuda", "cpu", "cpu"),
    ("cpu", "cuda", "cpu"),
    ("cuda", "cpu", "cuda"),
    ("cpu", "cuda", "cuda"),
]


@pytest.mark.parametrize(
    "target_device,draft_device,prompt_device",
    [pytest.param(*placement, marks=CUDA, id="-".join(placement)) for placement in PLACEMENTS],
)
def test_models_on_any_devices(target_device: str, draft_device: str, prompt_device: str) -> None:
    """Greedy equals the target alone and seeded sampling repeats, wherever each one sits."""
    target = tiny_model("qwen2", seed=0, vocab_size=64)
    draft = noisy_copy(target, scale=0.1, seed=1)
    target = deepcopy(target).to(target_device)
    draft = deepcopy(draft).to(draft_device)
    for prompt in random_prompts(3, 64, min_len=2, max_len=9, seed=11):
        expected = hf_greedy(target, prompt.to(target_device), 10)
        out = dynaspec.generate(
            target, draft, prompt.to(prompt_device), max_new_tokens=10, eos_token_id=[]
        )
        assert out.sequences.device.type == torch.device(target_device).type
        assert out.sequences.tolist() == expected.tolist()
        # transformers' processors are built on the target's device, whatever the draft's
        penalized = hf_greedy(target, prompt.to(target_device), 10, repetition_penalty=1.3)
        out = dynaspec.generate(
            target, draft, prompt.to(prompt_device), max_new_tokens=10, repetition_penalty=1.3
        )
        assert out.sequences.tolist() == penalized.tolist()
        sampling = dict(max_new_tokens=6, do_sample=True, seed=3, top_k=20, eos_token_id=5)
        sampling["min_new_tokens"] = 4  # with an EOS: a processor holding a device tensor
        sampled = dynaspec.generate(target, draft, prompt.to(prompt_device), **sampling)
        again = dynaspec.generate(target, draft, prompt.to(prompt_device), **sampling)
        assert sampled.sequences.tolist() == again.sequences.tolist()
