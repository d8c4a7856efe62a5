"""`dynaspec generate --prompts-file FILE --batch-size N`: many prompts, decoded in batches,
one JSON line per prompt (its text, new tokens and stats), in the file's order.

A prompts file holds one prompt per line: plain text, or JSON objects with a "prompt" field
(a .jsonl file); blank lines are skipped. Each batch is left-padded (the padding every row of
a batch needs) and decoded with `dynaspec.generate`, each row as it would be alone.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import torch
from tqdm.auto import tqdm

from dynaspec.errors import InputError
from dynaspec.eval.data import render_prompt
from dynaspec.generation import generate


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
