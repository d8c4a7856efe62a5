"""Converting a model to its fast copy holds little beside the copy: the pages of weights read
from a mapped file are given back, and every quantizer works a few rows at a time (the
same codes as over the whole matrix)."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from dynaspec.backends import pages, quant
from dynaspec.backends.kernels import int4_codes as int4_kernel
from dynaspec.backends.kernels.w4a8 import KERNEL as w4a8_kernel
from dynaspec.backends.pages import FileMapping, clean_file_mappings, drop_pages

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and madvise")

SMAPS = """\
7f0000000000-7f0000400000 rw-p 00000000 fe:00 123   /cache/model-00001-of-00002.safetensors
Size:               4096 kB
Private_Dirty:      4096 kB
Anonymous:             0 kB
7f0000400000-7f0000800000 rw-p 00000000 fe:00 124   /cache/model-00002-of-00002.safetensors
Size:               4096 kB
Anonymous:             8 kB
7f0000800000-7f0000c00000 rw-p 00000000 00:00 0
Size:               4096 kB
Anonymous:          4096 kB
7f0000c00000-7f0000c01000 r--p 00000000 00:00 0     [vvar]
Anonymous:             0 kB
"""


def test_only_clean_mappings_of_files_are_listed(tmp_path) -> None:
    smaps = tmp_path / "smaps"
    smaps.write_text(SMAPS)
    mappings = clean_file_mappings(str(smaps))
    # the shard written to in memory, the anonymous heap and [vvar] are left out
    assert mappings == (
        FileMapping(0x7F0000000000, 0x7F0000400000, "/cache/model-00001-of-00002.safetensors"),
    )


def _mapped_tensor(tmp_path, values: torch.Tensor) -> torch.Tensor:
    path = tmp_path / "weights.bin"
    values.numpy().tofile(path)
    return torch.from_file(str(path), shared=False, size=values.numel(), dtype=values.dtype)


@linux
def test_a_mapped_weights_pages_are_given_back_and_read_again(tmp_path) -> None:
    values = torch.randn(1 << 20)  # 4 MB
    mapped = _mapped_tensor(tmp_path, values)
    assert torch.equal(mapped, values)  # every page read
    dropped = drop_pages(mapped, clean_file_mappings())
    assert dropped >= values.numel() * 4 - 2 * 4096
    assert torch.equal(mapped, values)  # read back from the file


@linux
def test_a_mapping_the_process_wrote_to_keeps_its_pages(tmp_path) -> None:
    values = torch.randn(1 << 20)
    mapped = _mapped_tensor(tmp_path, values)
    mapped[0] = 5.0  # a private copy of the first page, the file unchanged
    assert drop_pages(mapped, clean_file_mappings()) == 0
    assert mapped[0] == 5.0 and torch.equal(mapped[1:], values[1:])


@linux
def test_memory_of_the_process_itself_is_never_given_back() -> None:
    values = torch.randn(1 << 20)
    kept = values.clone()
    everything = (FileMapping(0, 1 << 64, "/everywhere"),)
    mappings = tuple(m for m in clean_file_mappings() if m.start <= values.data_ptr() < m.end)
    assert mappings == ()  # anonymous memory is no file mapping
    assert drop_pages(values, mappings) == 0
    assert torch.equal(values, kept)
    assert drop_pages(values.t()[::2], everything) == 0  # not one block of bytes


@linux
def test_a_released_linear_gives_its_mapped_pages_back(tmp_path, monkeypatch) -> None:
    weight = torch.randn(256, 256)
    linear = nn.Linear(256, 256, bias=False)
    linear.weight = nn.Parameter(_mapped_tensor(tmp_path, weight).view(256, 256), False)
    given_back = []
    monkeypatch.setattr(quant, "drop_pages", lambda t, m: given_back.append(drop_pages(t, m)))
    made = quant.quantize_linear(linear, "int8")
    assert quant.release_replaced(linear, made, clean_file_mappings())
    assert given_back and given_back[0] >= weight.numel() * 4 - 2 * 4096
    assert linear.weight.numel() == 0


def _whole_matrix_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (weight.abs().amax(dim=1).float() / 127.0).clamp_min(1e-12).to(weight.dtype)
    codes = weight.float().div(scale.float()[:, None]).round().clamp(-127, 127)
    return codes.to(torch.int8), scale


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_codes_a_few_rows_at_a_time_are_the_whole_matrixs(dtype, monkeypatch) -> None:
    monkeypatch.setattr(quant, "QUANTIZE_ROWS", 7)
    weight = (torch.randn(40, 64) * torch.rand(40, 1) * 3).to(dtype)
    weight[5] = 0.0  # a row of zeros keeps the smallest scale
    codes, scale = quant.int8_codes(weight)
    expected_codes, expected_scale = _whole_matrix_int8(weight)
    assert torch.equal(codes, expected_codes)
    assert torch.equal(scale, expected_scale)


def test_int4_codes_a_few_rows_at_a_time_are_the_whole_matrixs(monkeypatch) -> None:
    weight = torch.randn(48, 64).to(torch.bfloat16)
    whole = int4_kernel.quantize(weight, 32)
    monkeypatch.setattr(int4_kernel, "QUANTIZE_ROWS", 5)
    for part, expected in zip(int4_kernel.quantize(weight, 32), whole, strict=True):
        assert torch.equal(part, expected)
    codes = (whole[0], whole[1], whole[2])
    error = int4_kernel.relative_error(codes, weight)
    direct = (int4_kernel.dequantize(*codes) - weight.float()).norm() / weight.float().norm()
    assert error == pytest.approx(float(direct), rel=1e-5)


def test_the_w4a8_layout_a_few_tiles_at_a_time_is_the_whole_matrixs(monkeypatch) -> None:
    codes, scale, offset = int4_kernel.quantize(torch.randn(256, 256), 32)
    whole = w4a8_kernel.packed(codes, scale, offset)
    monkeypatch.setattr(w4a8_kernel, "PACK_ROWS", 64)
    assert torch.equal(w4a8_kernel.packed(codes, scale, offset), whole)


def test_trimming_the_heap_is_harmless() -> None:
    kept = torch.randn(1000)
    copy = kept.clone()
    pages.trim_heap()
    assert torch.equal(kept, copy)
