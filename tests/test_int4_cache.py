"""int4 layers kept on disk (backends/int4_cache.py): a second load of the same weights reads
the packed codes and error back instead of searching, and gets exactly what the search
gives; anything else (other weights, a broken file, small layers, the switch) searches."""

from __future__ import annotations

import pytest
import torch

from dynaspec.backends import int4_cache
from dynaspec.backends.kernels import int4_codes
from dynaspec.backends.kernels.w4a8 import KERNEL as w4a8_kernel


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNASPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(int4_cache, "MIN_WEIGHTS", 1)
    calls = []
    search = int4_codes.quantize

    def counted(weight, group):
        calls.append(weight.shape)
        return search(weight, group)

    monkeypatch.setattr(int4_codes, "quantize", counted)
    return calls


def _weight(seed: int = 0) -> torch.Tensor:
    return torch.randn(128, 64, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def test_a_second_load_reads_what_the_search_gave(cache) -> None:
    weight = _weight()
    first = int4_cache.packed_layer(weight, 32, w4a8_kernel)
    second = int4_cache.packed_layer(weight.clone(), 32, w4a8_kernel)
    assert len(cache) == 1  # searched once
    assert torch.equal(first[0], second[0]) and first[1] == second[1]
    codes = int4_codes.quantize(weight, 32)
    assert torch.equal(w4a8_kernel.packed(*codes), second[0])
    assert second[1] == int4_codes.relative_error(codes, weight)
    assert len(list(int4_cache.folder().glob("*.safetensors"))) == 1
    assert second[0].data_ptr() % 64 == 0  # the kernels' aligned loads (a segfault else)


def test_other_weights_kernels_and_groups_are_other_entries(cache) -> None:
    weight = _weight()
    int4_cache.packed_layer(weight, 32, w4a8_kernel)
    other = weight.clone()
    other[5, 7] += 1.0
    int4_cache.packed_layer(other, 32, w4a8_kernel)
    assert len(cache) == 2
    keys = {
        int4_cache.weight_key(weight, 32, "a"),
        int4_cache.weight_key(other, 32, "a"),
        int4_cache.weight_key(weight, 32, "b"),
        int4_cache.weight_key(weight, 64, "a"),
    }
    assert len(keys) == 4


def test_a_broken_file_is_searched_again_and_rewritten(cache) -> None:
    weight = _weight()
    expected = int4_cache.packed_layer(weight, 32, w4a8_kernel)
    (path,) = int4_cache.folder().glob("*.safetensors")
    path.write_bytes(b"not a safetensors file")
    again = int4_cache.packed_layer(weight, 32, w4a8_kernel)
    assert len(cache) == 2
    assert torch.equal(again[0], expected[0])
    assert int4_cache.packed_layer(weight, 32, w4a8_kernel)[1] == expected[1]
    assert len(cache) == 2  # the rewritten file is read


def test_small_layers_and_the_switch_leave_no_files(cache, monkeypatch) -> None:
    monkeypatch.setattr(int4_cache, "MIN_WEIGHTS", 1 << 20)
    int4_cache.packed_layer(_weight(), 32, w4a8_kernel)
    monkeypatch.setattr(int4_cache, "MIN_WEIGHTS", 1)
    monkeypatch.setenv("DYNASPEC_INT4_CACHE", "0")
    int4_cache.packed_layer(_weight(), 32, w4a8_kernel)
    assert len(cache) == 2
    assert not int4_cache.folder().exists()


def test_an_unwritable_cache_is_skipped(cache, monkeypatch, tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("DYNASPEC_CACHE", str(blocker))  # a file: no folder can be made in it
    packed, error = int4_cache.packed_layer(_weight(), 32, w4a8_kernel)
    assert packed.numel() > 0 and error >= 0.0


def test_an_interrupted_write_leaves_no_partial_file(cache, monkeypatch) -> None:
    import safetensors.torch

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.torch, "save_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        int4_cache.packed_layer(_weight(), 32, w4a8_kernel)
    assert list(int4_cache.folder().iterdir()) == []
