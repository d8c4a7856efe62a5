"""What verification by coupling costs: acceptance of keyed seeds against rejection sampling.

With a seed, dynaspec samples with noise keyed by (seed, position, token) and accepts a
drafted token exactly when it equals the target's keyed sample (`seed_mode="keyed"`,
core/keyed.py); `seed_mode="stream"` verifies by rejection sampling. The two follow the
same distribution; coupling accepts at least (1 - TV) / (1 + TV) where rejection sampling
accepts 1 - TV. This instrument decodes the same prompts with the same seeds in both modes
and reports, per mode, the drafted and accepted tokens, the acceptance per drafted token,
the mean accepted per round and tokens per second, and the ratios keyed / stream; and it
checks that every keyed text equals the target alone's with its seed.

    python -m dynaspec.eval.coupling --pair tiny --n 4 --seeds 3 --max-new-tokens 64
    python -m dynaspec.eval.coupling --pair qwen2.5-coder --task grounded,open-ended,code \\
        --n 4 --seeds 2 --temperature 0.7 --top-p 0.9 --max-new-tokens 128

A fixed schedule (default `constant`, 5 tokens a round) keeps the drafted tokens per round
the same in both modes, so the acceptance is compared like for like; `--schedule adaptive`
reports what the adaptive rule makes of each.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from dynaspec.core.keyed import SEED_MODES
from dynaspec.generation import generate


@dataclass
class Tally:
    """One seed mode's totals over every prompt and seed."""

    runs: int = 0
    rounds: int = 0  # rounds that drafted
    drafted: int = 0
    accepted: int = 0
    new_tokens: int = 0
    seconds: float = 0.0
    differs_from_alone: int = 0  # keyed texts unlike the target alone's (must stay 0)

    def add(self, out: Any, seconds: float, prompt_length: int) -> None:
        drafting = [r for r in out.stats.rounds if r.num_drafted]
        self.runs += 1
        self.rounds += len(drafting)
        self.drafted += sum(r.num_drafted for r in drafting)
        self.accepted += sum(r.num_accepted for r in drafting)
        self.new_tokens += out.sequences.shape[1] - prompt_length
        self.seconds += seconds

    def summary(self) -> dict[str, float]:
        return {
            "acceptance": self.accepted / max(self.drafted, 1),
            "accepted_per_round": self.accepted / max(self.rounds, 1),
            "tokens_per_s": self.new_tokens / max(self.seconds, 1e-9),
        }


def measure(
    pair: Any, prompts: list[torch.Tensor], seeds: int, settings: dict[str, Any]
) -> dict[str, Tally]:
    """Both seed modes over every prompt and seed (the order of the modes turns), and the
    target alone's keyed text beside each keyed run."""
    tallies = {mode: Tally() for mode in SEED_MODES}
    for index, ids in enumerate(prompts):
        for seed in range(seeds):
            modes = SEED_MODES if (index + seed) % 2 == 0 else SEED_MODES[::-1]
            for mode in modes:
                start = time.perf_counter()
                out = generate(pair.target, pair.draft, ids, seed=seed, seed_mode=mode, **settings)
                tallies[mode].add(out, time.perf_counter() - start, ids.shape[1])
                if mode == "keyed":
                    alone = generate(pair.target, None, ids, seed=seed, **settings)
                    if alone.sequences.tolist() != out.sequences.tolist():
                        tallies[mode].differs_from_alone += 1
    return tallies


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="tiny", help="a load_pair preset, or tiny (default)")
    parser.add_argument(
        "--draft-noise", type=float, default=None, help="tiny: the draft's weight noise"
    )
    parser.add_argument("--task", default="grounded,open-ended,code")
    parser.add_argument("--n", type=int, default=4, help="prompts per task")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per prompt (0, 1, ...)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--schedule", default="constant")
    parser.add_argument("--lookahead", type=int, default=5, help="num_assistant_tokens")
    parser.add_argument("--out", default=None, help="a JSON file for the record")
    return parser.parse_args(argv)


def _prompts(pair: Any, task: str, n: int) -> list[torch.Tensor]:
    """The tasks' first n prompts each, rendered as the CLI renders them."""
    from dynaspec.eval.data import load_prompts
    from dynaspec.prompts import render_prompt, should_use_chat

    chat = should_use_chat(pair.tokenizer)
    return [
        render_prompt(pair.tokenizer, prompt.text, chat=chat)
        for name in task.split(",")
        for prompt in load_prompts(name, n)
    ]


def _pair(name: str, draft_noise: float | None) -> Any:
    """The named preset, or the tiny built-in pair (its draft as noisy as asked)."""
    from dynaspec.models.loading import load_pair
    from dynaspec.models.tiny import TinyPairConfig, tiny_pair

    if name != "tiny":
        return load_pair(name)
    config = TinyPairConfig() if draft_noise is None else TinyPairConfig(draft_noise=draft_noise)
    target, draft, tokenizer = tiny_pair(config)
    return argparse.Namespace(target=target, draft=draft, tokenizer=tokenizer)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    pair = _pair(args.pair, args.draft_noise)
    settings = {
        "do_sample": True,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
        "num_assistant_tokens_schedule": args.schedule,
        "num_assistant_tokens": args.lookahead,
    }
    prompts = _prompts(pair, args.task, args.n)
    tallies = measure(pair, prompts, args.seeds, settings)
    record = {
        "pair": args.pair,
        "draft_noise": args.draft_noise,
        "settings": settings,
        "prompts": len(prompts),
        "seeds": args.seeds,
        **{mode: {**asdict(t), **t.summary()} for mode, t in tallies.items()},
    }
    keyed, stream = (tallies[mode].summary() for mode in SEED_MODES)
    record["keyed_over_stream"] = {k: keyed[k] / max(stream[k], 1e-9) for k in keyed}
    print(json.dumps(record, indent=1))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(record, handle)
    return 1 if tallies["keyed"].differs_from_alone else 0


if __name__ == "__main__":
    raise SystemExit(main())
