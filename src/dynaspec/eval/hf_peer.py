"""transformers' own generation as a peer method for `dynaspec bench`.

Three configurations of `target.generate(...)`, run on the same prompts as dynaspec:

- ``hf-target``: plain greedy decoding, no assistant (a sanity baseline: it must produce
  exactly what dynaspec's target-alone loop produces);
- ``hf-heuristic``: assisted generation with the heuristic schedule (start at 5 tokens,
  +2 after a fully accepted round, -1 otherwise), no confidence stop;
- ``hf-dynamic``: transformers' default assisted generation, which is its dynamic
  speculation: up to 20 tokens, stop below draft confidence 0.4, constant schedule. With
  scikit-learn installed (the `bench` extra installs it) transformers also retunes that
  threshold online (ROC over the run's draft confidences), as a transformers user who has
  scikit-learn gets; without it the threshold stays fixed. ``sklearn_available()`` says
  which one ran, and the benchmark records it;
- ``hf-dynamic-0.4``: the same with the threshold kept at 0.4 (transformers' tuning
  switched off for the call: its candidate generator is told scikit-learn is missing), the
  published rule as it stands, which dynaspec's `dynamic` reproduces round for round.

and, with ``prompt_lookup_num_tokens``, transformers' prompt lookup (no assistant model).

transformers reads the assistant's schedule from ``assistant_model.generation_config`` and
writes the heuristic's learned lookahead back onto it at the end of every call. So before
every call the assistant's generation config is replaced by a fresh copy of the one it had
when `HFPeer` was built, the schedule is set on that copy, and the original is put back
afterwards: nothing leaks from one call (or one method) to the next.

Generation parameters are passed explicitly, with every logits processor that would change
a greedy argmax (repetition penalty, n-gram bans, forced or suppressed tokens, minimum
length) set to its neutral value, so a model's own ``generation_config.json`` (Qwen's sets
``repetition_penalty=1.1``) cannot make transformers decode something other than the plain
greedy output dynaspec produces.

Per-round numbers are read from forward pre-hooks (registered for the call, removed after):
each target forward is one round; its ``position_ids`` say how many tokens the target had
cached, from which the tokens drafted and accepted in each round follow.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import torch

# transformers' assisted generation calls the assistant's generate() with a generation_config
# and max_new_tokens / min_new_tokens together (generation/candidate_generator.py), then
# warns that doing so is deprecated: a warning about its own code that no user can act on.
OWN_DEPRECATION = "Passing `generation_config` together with generation-related arguments"


class _DropMessage(logging.Filter):
    """Drops the log records whose message starts with `prefix`."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


@contextmanager
def _without_transformers_own_deprecation() -> Iterator[None]:
    """transformers' OWN_DEPRECATION warning left out for the duration (nothing else)."""
    logger = logging.getLogger("transformers.generation.utils")
    drop = _DropMessage(OWN_DEPRECATION)
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


@contextmanager
def _threshold_tuning(enabled: bool) -> Iterator[None]:
    """transformers' online tuning of the dynamic threshold left as it is (`enabled`), or
    switched off for the duration: its candidate generator checks `is_sklearn_available()`
    before every use of scikit-learn, so that name answers False meanwhile."""
    if enabled:
        yield
        return
    from transformers.generation import candidate_generator

    saved = candidate_generator.is_sklearn_available
    candidate_generator.is_sklearn_available = lambda: False
    try:
        yield
    finally:
        candidate_generator.is_sklearn_available = saved


@dataclass(frozen=True)
class HFAssistConfig:
    """An assisted-generation schedule, in transformers' own parameter names."""

    num_assistant_tokens: int  # starting (heuristic) or fixed (constant) lookahead
    num_assistant_tokens_schedule: str  # "heuristic" | "constant" | "heuristic_transient"
    assistant_confidence_threshold: float  # stop drafting below this confidence (0: never)
    tune_threshold: bool = True  # let transformers retune it (where scikit-learn is installed)


HF_HEURISTIC = HFAssistConfig(5, "heuristic", 0.0)  # transformers' heuristic configuration
HF_DYNAMIC = HFAssistConfig(20, "constant", 0.4)  # transformers' default: dynamic speculation
HF_DYNAMIC_FIXED = HFAssistConfig(20, "constant", 0.4, tune_threshold=False)  # never retuned

# generate() kwargs that switch off every processor able to change a greedy argmax
NEUTRAL_GREEDY_KWARGS: dict[str, Any] = {
    "do_sample": False,
    "num_beams": 1,
    "temperature": None,
    "top_k": None,
    "top_p": None,
    "min_p": None,
    "typical_p": None,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "sequence_bias": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "min_length": 0,
    "min_new_tokens": None,
    "renormalize_logits": False,
    "remove_invalid_values": False,
}


def sklearn_available() -> bool:
    """Whether transformers will tune the dynamic threshold online (it needs scikit-learn)."""
    return importlib.util.find_spec("sklearn") is not None


@dataclass
class HFResult:
    """One transformers generate() call, measured the way dynaspec's stats are."""

    sequences: torch.Tensor  # (1, T + new) prompt then new tokens
    wall_time_s: float  # the whole generate() call
    target_forwards: int  # target forward calls (one per round)
    draft_forwards: int  # assistant forward calls (its prefill included)
    drafted_per_round: list[int] = field(default_factory=list)  # empty when not derivable
    accepted_per_round: list[int] = field(default_factory=list)  # empty when not derivable


class _ForwardLog:
    """Forward pre-hook recording (input length, cached length) of every forward call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int | None]] = []

    def __call__(self, module: Any, args: tuple, kwargs: dict) -> None:
        input_ids = kwargs.get("input_ids")
        if input_ids is None and args:
            input_ids = args[0]
        length = int(input_ids.shape[-1]) if isinstance(input_ids, torch.Tensor) else 0
        positions = kwargs.get("position_ids")
        if positions is None:
            positions = kwargs.get("cache_position")
        past = int(positions.reshape(-1)[0]) if isinstance(positions, torch.Tensor) else None
        self.calls.append((length, past))


def rounds_from_target_calls(
    calls: list[tuple[int, int | None]], prompt_tokens: int, final_length: int
) -> tuple[list[int], list[int]]:
    """(drafted per round, accepted per round) from the target's (input length, cached) calls.

    Round i feeds positions past_i .. past_i + n_i - 1; the committed tokens before it end at
    committed_i - 1, so it verified ``past_i + n_i - committed_i`` drafted tokens. The next
    round starts at the last committed token: committed_{i+1} = past_{i+1} + 1, and the last
    round ends at ``final_length``. Returns two empty lists when the numbers do not add up
    (a cache layout this reading does not understand).
    """
    if not calls or any(past is None for _, past in calls):
        return [], []
    committed = prompt_tokens
    drafted: list[int] = []
    accepted: list[int] = []
    for index, (length, past) in enumerate(calls):
        assert past is not None
        after = calls[index + 1][1] + 1 if index + 1 < len(calls) else final_length  # type: ignore[operator]
        num_drafted = past + length - committed
        num_accepted = after - committed - 1
        if num_drafted < 0 or not 0 <= num_accepted <= num_drafted:
            return [], []
        drafted.append(num_drafted)
        accepted.append(num_accepted)
        committed = after
    return drafted, accepted


class HFPeer:
    """Runs transformers' generate() on a target (and assistant) without leaking state."""

    def __init__(self, target: Any, draft: Any | None = None) -> None:
        self.target = target
        self.draft = draft
        self._draft_config = copy.deepcopy(draft.generation_config) if draft is not None else None

    def generate(
        self,
        input_ids: torch.Tensor,
        *,
        max_new_tokens: int,
        eos_token_id: int | list[int] | None,
        pad_token_id: int | None,
        assist: HFAssistConfig | None = None,
        prompt_lookup_num_tokens: int | None = None,
        tokenizers: tuple[Any, Any] | None = None,
    ) -> HFResult:
        """Greedy `target.generate`, assisted by the draft with schedule `assist` if given,
        or by prompt lookup with `prompt_lookup_num_tokens`. `tokenizers`: the target's and
        the draft's, for a draft of another vocabulary (universal assisted generation)."""
        if assist is not None and self.draft is None:
            raise ValueError("an assisted configuration needs a draft model")
        kwargs: dict[str, Any] = dict(NEUTRAL_GREEDY_KWARGS)
        kwargs.update(
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            attention_mask=torch.ones_like(input_ids),
        )
        if prompt_lookup_num_tokens is not None:
            kwargs["prompt_lookup_num_tokens"] = prompt_lookup_num_tokens
        target_log, draft_log = _ForwardLog(), _ForwardLog()
        hooks = [self.target.register_forward_pre_hook(target_log, with_kwargs=True)]
        if assist is not None:
            self._reset_draft_config(assist)
            kwargs["assistant_model"] = self.draft
            if tokenizers is not None:
                kwargs["tokenizer"], kwargs["assistant_tokenizer"] = tokenizers
            hooks.append(self.draft.register_forward_pre_hook(draft_log, with_kwargs=True))
        tuning = assist is None or assist.tune_threshold
        try:
            with (
                torch.inference_mode(),
                _without_transformers_own_deprecation(),
                _threshold_tuning(tuning),
            ):
                start = perf_counter()
                sequences = self.target.generate(input_ids, **kwargs)
                wall = perf_counter() - start
        finally:
            for hook in hooks:
                hook.remove()
            if self.draft is not None:
                self.draft.generation_config = copy.deepcopy(self._draft_config)
        prompt_tokens = input_ids.shape[1]
        if assist is None and prompt_lookup_num_tokens is None:
            drafted = [0] * len(target_log.calls)
            accepted = [0] * len(target_log.calls)
        else:
            drafted, accepted = rounds_from_target_calls(
                target_log.calls, prompt_tokens, sequences.shape[1]
            )
        return HFResult(
            sequences=sequences,
            wall_time_s=wall,
            target_forwards=len(target_log.calls),
            draft_forwards=len(draft_log.calls),
            drafted_per_round=drafted,
            accepted_per_round=accepted,
        )

    def _reset_draft_config(self, assist: HFAssistConfig) -> None:
        config = copy.deepcopy(self._draft_config)
        config.num_assistant_tokens = assist.num_assistant_tokens
        config.num_assistant_tokens_schedule = assist.num_assistant_tokens_schedule
        config.assistant_confidence_threshold = assist.assistant_confidence_threshold
        self.draft.generation_config = config
