"""Offline: would verifying several lookup continuations at once (a tree of branches in one
target forward) pay on the quote summaries? On the recorded target outputs, priced on
replay.py's line, against transformers' prompt lookup (10): each round proposes the
continuations (up to L tokens) of the earlier occurrences of the newest 2-gram (else
1-gram), ordered by agreement; a tree of B branches costs one forward over its distinct
prefixes, and keeps the longest that the target keeps. "best of" proposes only the branch
that will be kept longest (foreknowledge): what choosing the occurrence well could gain.

    python branches.py [PROMPT_PREFIX]      (default lee: the quote summaries)
"""

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay  # noqa: E402

from dynaspec import load_pair  # noqa: E402

MAX_AGREEMENT = 32


def occurrences(seq: list[int], end: int) -> list[tuple[int, int]]:
    """(where the continuation starts, agreement) of each earlier occurrence of the newest
    2-gram, else 1-gram, with a token after it."""
    for n in (2, 1):
        found = []
        for s in range(end - n):
            if seq[s : s + n] != seq[end - n : end]:
                continue
            agreement = n
            while (
                agreement < MAX_AGREEMENT
                and s - 1 - (agreement - n) >= 0
                and seq[s - 1 - (agreement - n)] == seq[end - 1 - agreement]
            ):
                agreement += 1
            found.append((s + n, agreement))
        if found:
            return found
    return []


def kept(seq: list[int], end: int, branch: tuple[int, ...]) -> int:
    count = 0
    while count < len(branch) and end + count < len(seq) and branch[count] == seq[end + count]:
        count += 1
    return count


def decode_s(seq: list[int], start: int, order: str, length: int, width: int) -> float:
    end, seconds = start, 0.0
    while end < len(seq):
        found = occurrences(seq, end)
        if order != "leftmost":
            found = sorted(found, key=lambda item: (-item[1], item[0]))
        branches: list[tuple[int, ...]] = []
        for first, _ in found:
            branch = tuple(seq[first : min(first + length, end)])
            if branch and branch not in branches:
                branches.append(branch)
        if order == "best":
            branches = sorted(branches, key=lambda b: -kept(seq, end, b))[:1]
        branches = branches[:width]
        prefixes = {branch[:i] for branch in branches for i in range(1, len(branch) + 1)}
        seconds += replay.forward_s(1 + len(prefixes))
        end += max((kept(seq, end, branch) for branch in branches), default=0) + 1
    return seconds


VARIANTS = {  # name: (order, L, branches)
    "longest agreement, 10": ("longest", 10, 1),
    "tree of 2, 10": ("longest", 10, 2),
    "tree of 4, 10": ("longest", 10, 4),
    "tree of 8, 10": ("longest", 10, 8),
    "best of all, 10": ("best", 10, 1),
    "longest agreement, 20": ("longest", 20, 1),
    "tree of 4, 20": ("longest", 20, 4),
}
tok = load_pair("qwen2.5-coder").tokenizer
ratios: dict[str, list[float]] = {name: [] for name in VARIANTS}
for seed, key, ids, out in replay.recorded(
    tok, "grounded", sys.argv[1] if len(sys.argv) > 1 else "lee"
):
    seq, start = torch.cat([ids, out]).tolist(), ids.numel()
    prefill = replay.forward_s(start)
    base = prefill + decode_s(seq, start, "leftmost", 10, 1)
    line = f"{seed} {key[:24]:24s}"
    for name, variant in VARIANTS.items():
        ratios[name].append(base / (prefill + decode_s(seq, start, *variant)))
        line += f"  {ratios[name][-1]:.3f}"
    print(line, flush=True)
print("columns:", " | ".join(VARIANTS))
for name, values in ratios.items():
    print(
        f"{name:24s} / transformers' PL(10): median {statistics.median(values):.3f}, "
        f"{min(values):.3f}-{max(values):.3f}"
    )
