"""Prompts into input ids: one user message rendered with the model's chat template
(`dynaspec generate`, the instruments), and `dynaspec generate --prompts-file FILE
--batch-size N`: many prompts, decoded in batches, one JSON line per prompt (its text, new
tokens and stats), in the file's order.

A prompts file holds one prompt per line: plain text, or JSON objects with a "prompt" field
(a .jsonl file); blank lines are skipped. Each batch is left-padded (the padding every row of
a batch needs) and decoded with `dynaspec.generate`, each row as it would be alone.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import torch
from tqdm.auto import tqdm

from dynaspec.errors import InputError
from dynaspec.generation import generate

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def should_use_chat(tokenizer: PreTrainedTokenizerBase) -> bool:
    """True when the tokenizer has a chat template (an instruct model)."""
    return bool(getattr(tokenizer, "chat_template", None))


def render_prompt(tokenizer: PreTrainedTokenizerBase, text: str, *, chat: bool) -> torch.Tensor:
    """Input ids (1, T) int64 for one user message.

    With ``chat=True`` and a tokenizer that has a chat template, the message is rendered as
    a single user turn followed by the generation prompt; otherwise (``chat=False``, or no
    template) the text is tokenized as is, with the tokenizer's usual special tokens.
    """
    if not text:
        raise InputError("the prompt text is empty: give at least one character")
    if chat and should_use_chat(tokenizer):
        encoded: Any = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )
    else:
        encoded = tokenizer(text, return_tensors="pt")
    # transformers 5 returns a BatchEncoding (a mapping); older versions may give the tensor
    input_ids = encoded["input_ids"] if isinstance(encoded, Mapping) else encoded
    input_ids = torch.as_tensor(input_ids, dtype=torch.long)  # (1, T)
    if input_ids.ndim != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] == 0:
        raise InputError(
            f"rendering the prompt gave input ids of shape {tuple(input_ids.shape)}, "
            "expected (1, T) with T >= 1: check the tokenizer and its chat template"
        )
    return input_ids


def read_prompts(path: str | Path) -> list[str]:
    """The prompts of a file: a line each, plain text or {"prompt": ...} JSON lines."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read --prompts-file {path}: {error}") from error
    prompts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                prompt = json.loads(line)["prompt"]
            except (ValueError, KeyError, TypeError) as error:
                raise InputError(
                    f'--prompts-file {path}, line {number}: a JSON line needs a "prompt" '
                    f"string ({error})"
                ) from error
            if not isinstance(prompt, str) or not prompt:
                raise InputError(f'--prompts-file {path}, line {number}: "prompt" is empty')
            line = prompt
        prompts.append(line)
    if not prompts:
        raise InputError(f"--prompts-file {path} holds no prompt: write one per line")
    return prompts


def left_padded(rows: Sequence[torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) ids left-padded with `pad`, and their attention mask, from (1, T_i) rows."""
    width = max(row.shape[1] for row in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, width - row.shape[1] :] = row[0]
        mask[index, width - row.shape[1] :] = 1
    return ids, mask


def _batches(items: Sequence[Any], size: int) -> Iterator[tuple[int, Sequence[Any]]]:
    for start in range(0, len(items), size):
        yield start, items[start : start + size]


def run_prompts_file(
    target: Any,
    draft: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    batch_size: int,
    options: dict[str, Any],
    chat: bool,
    out: TextIO | None = None,
) -> None:
    """Decodes `prompts` `batch_size` at a time; writes one JSON line per prompt to `out`
    (default: standard output)."""
    out = sys.stdout if out is None else out
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    with tqdm(total=len(prompts), unit="prompt", file=sys.stderr) as progress:
        for start, texts in _batches(prompts, batch_size):
            rows = [render_prompt(tokenizer, text, chat=chat) for text in texts]
            ids, mask = left_padded(rows, pad)
            batch, batch_mask = (ids, mask) if len(rows) > 1 else (rows[0], None)
            output = generate(
                target, draft, batch, attention_mask=batch_mask, pad_token_id=pad, **options
            )
            stats = output.row_stats or (output.stats,)
            for offset, text in enumerate(texts):
                new = output.sequences[offset, ids.shape[1] :].tolist()
                new = new[: stats[offset].summary().new_tokens]  # without the padding after
                record = {
                    "index": start + offset,
                    "prompt": text,
                    "text": tokenizer.decode(new, skip_special_tokens=True),
                    "tokens": new,
                    "stats": stats[offset].summary().to_dict(),
                }
                out.write(json.dumps(record) + "\n")
            out.flush()
            progress.update(len(rows))
