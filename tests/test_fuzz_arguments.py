"""A fuzz test of the Python API's argument checks (issue 24): random values of the wrong type
or range for every keyword of `dynaspec.GenerationKwargs` and for `generate`'s own arguments
end in a `dynaspec.errors` type or a valid output, never a raw AttributeError, RuntimeError,
IndexError or TypeError from deep inside.

The model is a tiny fp32 Llama with a 32-token context, so that a large valid length is
refused by the context check instead of decoding for long. Examples are derandomized: the
same values every run, so that CI is reproducible.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_models import noisy_copy, tiny_model

import dynaspec
from dynaspec.core.loop import GenerateOutput
from dynaspec.errors import ConfigError, DynaspecError, InputError, NumericalError

CONTEXT = 32
TARGET = tiny_model("llama", max_length=CONTEXT, eos_token_id=5)
DRAFT = noisy_copy(TARGET, scale=0.1)
PROMPT = torch.tensor([[1, 2, 3, 1, 2]])
# DYNASPEC_FUZZ_EXAMPLES=3000 DYNASPEC_FUZZ_SEED=1 explores further, off CI.
EXAMPLES = int(os.environ.get("DYNASPEC_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="DYNASPEC_FUZZ_SEED" not in os.environ,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

KEYWORDS = sorted(dynaspec.GenerationKwargs.__annotations__)
OWN_ARGUMENTS = (
    "num_assistant_tokens",
    "assistant_confidence_threshold",
    "num_assistant_tokens_schedule",
    "seed",
    "prompt_lookup_num_tokens",
    "max_matching_ngram_size",
    "attention_mask",
    "input_ids",
)


class Opaque:
    """An object of no expected kind."""

    def __repr__(self) -> str:
        return "Opaque()"


_TENSORS = (
    torch.tensor([1, 2]),
    torch.tensor(1.5),
    torch.tensor(3),
    torch.tensor([[1, 1, 1, 1, 1]]),
    torch.tensor([[1, 0, 1, 1, 1]]),
    torch.tensor([[0.5, 1, 1, 1, 1]]),
    torch.zeros(2, 2),
    torch.ones(2, 5, dtype=torch.long),
    torch.empty(0, dtype=torch.long),
    torch.tensor([[True, True, True, True, True]]),
    torch.tensor([[1, 2, 70, 3, 4]]),
    torch.tensor([[-1, 2, 3]]),
    torch.tensor([[[1, 2, 3]]]),
    torch.tensor([[1.0, 2.0]]),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=40),
    st.sampled_from([63, 64, 65, -64, -65, 2**63, 10**30]),  # the vocabulary's edges (64)
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-2.0, max_value=2.0),
    st.text(max_size=4),
    st.binary(max_size=3),
    st.sampled_from(["adaptive", "dynamic", "constant", "heuristic", "greedy", "0", "1.5"]),
    st.sampled_from(_TENSORS),
    st.builds(Opaque),
    st.just(complex(1, 2)),
    st.just(math.pi),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children, children),
        st.dictionaries(st.text(max_size=2), children, max_size=2),
    ),
    max_leaves=6,
)


def outcome(**arguments: Any) -> None:
    """generate() on the tiny pair ends in a DynaspecError or a valid output; anything else
    (a raw AttributeError, TypeError, ...) propagates and fails the example."""
    input_ids = arguments.pop("input_ids", PROMPT)
    arguments.setdefault("max_new_tokens", 3)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' and dynaspec's own notices
            out = dynaspec.generate(TARGET, DRAFT, input_ids, **arguments)
    except DynaspecError:
        return
    assert isinstance(out, GenerateOutput)
    assert out.sequences.dim() == 2 and out.sequences.dtype == torch.long
    new = out.sequences.shape[1] - torch.as_tensor(input_ids).shape[-1]
    assert 0 <= new <= CONTEXT


@pytest.mark.filterwarnings("ignore")
@FUZZ
@given(name=st.sampled_from(KEYWORDS), value=VALUES, do_sample=st.booleans())
def test_every_generation_keyword(name: str, value: Any, do_sample: bool) -> None:
    arguments: dict[str, Any] = {name: value}
    if name != "do_sample":
        arguments["do_sample"] = do_sample
    if name == "max_length":
        arguments["max_new_tokens"] = None  # else max_new_tokens takes precedence
    outcome(**arguments)


@pytest.mark.filterwarnings("ignore")
@FUZZ
@given(name=st.sampled_from(OWN_ARGUMENTS), value=VALUES, do_sample=st.booleans())
def test_every_argument_of_generate(name: str, value: Any, do_sample: bool) -> None:
    outcome(**{name: value}, do_sample=do_sample)


@pytest.mark.filterwarnings("ignore")
@settings(FUZZ, max_examples=max(1, EXAMPLES * 2 // 5))
@given(values=st.dictionaries(st.sampled_from([*KEYWORDS, *OWN_ARGUMENTS]), VALUES, max_size=4))
def test_several_at_once(values: dict[str, Any]) -> None:
    outcome(**values)


# What the fuzz found, each raw before (in brackets), each typed now.
FOUND = [
    ("epsilon_cutoff", Opaque(), ConfigError),  # [TypeError: '<=' not supported]
    ("max_time", torch.tensor([1, 2]), ConfigError),  # [RuntimeError: ambiguous bool]
    ("do_sample", torch.tensor([1, 2]), ConfigError),  # [RuntimeError: ambiguous bool]
    ("forced_eos_token_id", False, ConfigError),  # [IndexError]
    ("forced_eos_token_id", 64, ConfigError),  # [IndexError: out of bounds]
    ("bad_words_ids", [[64]], ConfigError),  # [ValueError, while decoding]
    ("sequence_bias", {(64,): 1.0}, ConfigError),  # [ValueError, while decoding]
    ("sequence_bias", [{}], ConfigError),  # [KeyError]
    ("sequence_bias", [[]], ConfigError),  # [IndexError]
    ("sequence_bias", {(1,): math.nan}, ConfigError),  # [RuntimeError when sampling]
    ("exponential_decay_length_penalty", (1, math.nan), ConfigError),  # [RuntimeError]
    ("exponential_decay_length_penalty", (-(10**30), 1.5), NumericalError),  # [OverflowError]
    ("min_new_tokens", Opaque(), ConfigError),  # [TypeError: unsupported operand]
    ("num_assistant_tokens", 10**9, ConfigError),  # [no end: the adaptive rule's loop]
    ("num_assistant_tokens_schedule", ["adaptive"], ConfigError),  # [TypeError: unhashable]
    ("seed", 2**70, ConfigError),  # [ValueError: Overflow when unpacking long long]
    ("attention_mask", "x", InputError),  # [TypeError: invalid data type 'str']
]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(("name", "value", "error"), FOUND, ids=[f[0] for f in FOUND])
def test_what_the_fuzz_found(name: str, value: Any, error: type[DynaspecError]) -> None:
    with pytest.raises(error):
        dynaspec.generate(
            TARGET, DRAFT, PROMPT, max_new_tokens=3, **{"do_sample": True, name: value}
        )


def test_an_ngram_longer_than_the_prompt_is_a_no_op() -> None:
    """encoder_no_repeat_ngram_size beyond the prompt bans nothing (transformers would list
    the prompt's n-grams through that many slices: 10**9 of them filled the memory)."""
    plain = dynaspec.generate(TARGET, DRAFT, PROMPT, max_new_tokens=6)
    longer = dynaspec.generate(
        TARGET, DRAFT, PROMPT, max_new_tokens=6, encoder_no_repeat_ngram_size=10**9
    )
    assert torch.equal(plain.sequences, longer.sequences)


def test_a_type_error_names_the_keyword_and_what_it_takes() -> None:
    with pytest.raises(
        ConfigError, match=r"top_k must be an int \(None: unset\), got .3. \(a str\)"
    ):
        dynaspec.generate(TARGET, DRAFT, PROMPT, max_new_tokens=3, top_k="3")
    with pytest.raises(ConfigError, match=r"suppress_tokens must be a list of token ids"):
        dynaspec.generate(TARGET, DRAFT, PROMPT, max_new_tokens=3, suppress_tokens=[1.5])
    out = dynaspec.generate(  # numpy-style and 0-d tensor numbers are numbers
        TARGET, DRAFT, PROMPT, max_new_tokens=3, top_k=torch.tensor(5), do_sample=True
    )
    assert out.sequences.shape == (1, PROMPT.shape[1] + 3)
