"""Whether a target and a draft can be paired: the same tokens for every id, the same split
of a probe text, the same eos id, and logits of the same width."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynaspec.errors import IncompatibleModelsError
from dynaspec.models.vocab import check_same_vocabulary, tokenizer_vocabulary

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

# Text whose tokenization both tokenizers of a pair must agree on (code, prose, unicode).
_TOKENIZER_PROBE = (
    "def fibonacci(n: int) -> int:\n    return n if n < 2 else fibonacci(n - 1) + "
    "fibonacci(n - 2)  # naïve ✓\n\nThe quick brown fox – 42 € – 東京 🚀\t<tag/>"
)


def check_pair_compatible(
    target: PreTrainedModel,
    draft: PreTrainedModel,
    target_tokenizer: PreTrainedTokenizerBase,
    draft_tokenizer: PreTrainedTokenizerBase,
) -> None:
    """Raise IncompatibleModelsError unless draft and target share tokens and logit width.

    Checks: identical vocabularies (the same token for every id), identical tokenization
    of a probe text, equal eos id, and equal number of lm_head rows (the logits' last
    dimension).
    """
    _check_tokenizers(target_tokenizer, draft_tokenizer)
    _check_logit_widths(_logit_width(target), _logit_width(draft))


def _check_tokenizers(
    target_tokenizer: PreTrainedTokenizerBase,
    draft_tokenizer: PreTrainedTokenizerBase,
    names: tuple[str, str] | None = None,
    *,
    same_eos: bool = True,
) -> None:
    """The vocabularies and the split of a probe text must agree; with `same_eos` the eos
    ids too. `names`: (target, draft) as the caller gave them, for the message."""
    target_name, draft_name = names or (None, None)
    check_same_vocabulary(
        tokenizer_vocabulary(target_tokenizer),
        tokenizer_vocabulary(draft_tokenizer),
        target_name=target_name,
        draft_name=draft_name,
    )
    target_ids = target_tokenizer.encode(_TOKENIZER_PROBE, add_special_tokens=False)
    draft_ids = draft_tokenizer.encode(_TOKENIZER_PROBE, add_special_tokens=False)
    if target_ids != draft_ids:
        raise IncompatibleModelsError(
            "draft and target tokenizers have the same vocabulary but split text differently "
            "(different merges or pre-tokenizer): pick a draft with the target's tokenizer"
        )
    if same_eos and target_tokenizer.eos_token_id != draft_tokenizer.eos_token_id:
        raise IncompatibleModelsError(
            f"draft eos id {draft_tokenizer.eos_token_id} != target eos id "
            f"{target_tokenizer.eos_token_id}: pick a draft with the target's tokenizer"
        )


def _check_logit_widths(target_rows: int, draft_rows: int) -> None:
    if target_rows != draft_rows:
        raise IncompatibleModelsError(
            f"draft vocabulary {draft_rows} != target vocabulary {target_rows} (lm_head rows): "
            "the logits must have the same width; pick a draft with the target's vocabulary"
        )


def _logit_width(model: PreTrainedModel) -> int:
    head = model.get_output_embeddings()
    if head is None:
        return int(model.config.vocab_size)
    return int(head.weight.shape[0])
