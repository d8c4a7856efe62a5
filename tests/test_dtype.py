"""The machine-chosen dtype: bf16 where the CPU multiplies bf16 natively, float32 on other
CPUs; "auto" keeps transformers' meaning; the choice and its reason are recorded."""

from __future__ import annotations

import pytest
import torch

from dynaspec.errors import ConfigError
from dynaspec.eval.provenance import machine_info
from dynaspec.models.dtype import (
    AUTO,
    CPU_FLAGS,
    CpuFeatures,
    choose_dtype,
    cpu_features,
    machine_dtype,
    parse_cpu_flags,
)

# /proc/cpuinfo excerpts of the two CPU classes measured (README, "Results depend on the
# hardware"): an AVX2-only EPYC and one with AVX512-BF16; and a Sapphire Rapids with AMX.
AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\nmodel name\t: AMD EPYC\n"
AVX512_BF16 = "flags\t\t: fpu avx2 avx512f avx512bw avx512_bf16 avx512_vnni\n"
AMX = "flags\t\t: avx2 avx512f amx_bf16 amx_tile amx_int8\n"
ARM = "Features\t: fp asimd bf16 i8mm\n"


def features(cpuinfo: str) -> CpuFeatures:
    return cpu_features(cpuinfo)


def test_flags_are_read_from_cpuinfo() -> None:
    assert parse_cpu_flags(AVX2_ONLY) == {"avx2"}
    assert parse_cpu_flags(AVX512_BF16) == {"avx2", "avx512f", "avx512_bf16"}
    assert parse_cpu_flags(AMX) == {"avx2", "avx512f", "amx_bf16", "amx_tile"}
    assert parse_cpu_flags(ARM) is None and parse_cpu_flags("") is None


@pytest.mark.parametrize(
    "cpuinfo,dtype,reason",
    [
        (AVX512_BF16, torch.bfloat16, "this CPU has avx512_bf16, so it multiplies bf16"),
        (AMX, torch.bfloat16, "this CPU has amx_bf16, so it multiplies bf16 natively"),
        (AVX2_ONLY, torch.float32, "lacks avx512_bf16 and amx_bf16, so bf16 would be emulated"),
        (ARM, torch.float32, "no x86 CPU flags to read on"),
        ("", torch.float32, "no x86 CPU flags to read on"),
    ],
)
def test_machine_dtype_on_each_cpu_class(cpuinfo: str, dtype: torch.dtype, reason: str) -> None:
    choice = machine_dtype("cpu", features(cpuinfo))
    assert choice.dtype is dtype
    assert reason in choice.reason and choice.reason.startswith("machine: ")
    assert choice.line() == f"{choice.name} ({choice.reason})"


def test_a_gpu_gets_bf16_where_it_has_it() -> None:
    choice = machine_dtype("cuda")
    if torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        assert choice.dtype is torch.float16
    else:
        assert choice.dtype is torch.bfloat16 and "GPU" in choice.reason


def test_the_loaders_machine_dtype_follows_the_device() -> None:
    from dynaspec.models.loading import resolve_dtype

    assert resolve_dtype(None, auto_means="auto") is machine_dtype("cpu").dtype
    assert resolve_dtype("machine", auto_means="auto", device="cuda") is machine_dtype("cuda").dtype
    assert resolve_dtype("auto", auto_means=torch.float32, device="cuda") is torch.float32


def test_choose_dtype_names() -> None:
    assert choose_dtype(None) == machine_dtype()
    assert choose_dtype("machine") == machine_dtype()
    assert choose_dtype(" Machine ") == machine_dtype()
    assert (
        choose_dtype("auto").dtype == AUTO
        and "checkpoint's own dtype" in choose_dtype("auto").reason
    )
    assert choose_dtype("bf16").dtype is torch.bfloat16
    assert choose_dtype("torch.float16").dtype is torch.float16
    assert choose_dtype(torch.float32).reason == "as requested"
    with pytest.raises(ConfigError, match="use one of machine, auto, bfloat16"):
        choose_dtype("int8")
    with pytest.raises(ConfigError, match="not supported"):
        choose_dtype(torch.int8)
    with pytest.raises(ConfigError, match="string or torch.dtype"):
        choose_dtype(16)  # type: ignore[arg-type]


def test_records_name_the_instruction_sets_and_the_choice() -> None:
    record = features(AVX512_BF16).record()
    assert set(record) == {*CPU_FLAGS, "torch_cpu_capability"}
    assert record["avx512_bf16"] is True and record["amx_bf16"] is False
    assert features("").record()["avx2"] is None  # unknown, not absent
    info = machine_info()
    assert set(info["cpu_features"]) == set(record)
    assert info["cpu_features"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["machine_dtype"] == machine_dtype().name
    assert info["machine_dtype_reason"] == machine_dtype().reason
