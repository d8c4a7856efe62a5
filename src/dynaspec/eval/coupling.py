"""What verification by coupling costs: acceptance of keyed seeds against rejection sampling.

With a seed, dynaspec samples with noise keyed by (seed, position, token) and accepts a
drafted token exactly when it equals the target's keyed sample (`seed_mode="keyed"`,
core/keyed.py); `seed_mode="stream"` verifies by rejection sampling. The two follow the
same distribution; coupling accepts at least (1 - TV) / (1 + TV) where rejection sampling
accepts 1 - TV. This instrument decodes the same prompts with the same seeds in both modes,
for every draft source (`model`, `lookup`: prompt lookup alone, `hybrid`), lookahead and
schedule asked (the draft the pair's, or `--draft`'s: with `--cross-tokenizer` one of
another tokenizer, drafting over the tokens both share), and reports per setting and in
all: the drafted and accepted tokens, the acceptance per drafted token, the mean accepted
per round, tokens per second, and the ratios keyed / stream. It checks that every keyed
text equals the target alone's with its seed (decoded once per prompt and seed) and counts
those that differ: 0 where the target's forward is bit-exact (float32, or the static bf16
path: `--fast`); exit status 1 otherwise.

    python -m dynaspec.eval.coupling --pair tiny --n 4 --seeds 3 --max-new-tokens 64
    python -m dynaspec.eval.coupling --pair qwen2.5-coder --fast --n 2 --seeds 2 \\
        --temperature 0.7 --top-p 0.9 --max-new-tokens 128 \\
        --settings model/constant/5,hybrid/constant/5,hybrid/adaptive/20 --out t07.json
    python -m dynaspec.eval.coupling --pair qwen2.5-coder --fast --modes keyed --seeds 2 \\
        --source model,lookup,hybrid --lookahead 4,8 --schedule constant,adaptive \\
        --batch 1,4 --server-clients 4 --max-new-tokens 32 --out seeded-runs.json
        # 6 prompts x 2 seeds x 12 settings x 2 batch sizes = 288 keyed, + 12 through serve
    python -m dynaspec.eval.coupling --pair qwen2.5-coder --draft smollm2-135m \\
        --cross-tokenizer --fast --modes keyed --seeds 2 --source model,hybrid \\
        --lookahead 4,8 --schedule constant,adaptive --batch 1,4 --server-clients 4 \\
        --temperature 0.7 --top-p 0.9 --max-new-tokens 32 --out cross-seeded-runs.json
        # the pair's target, SmolLM2-135M drafting: 192 keyed, + 12 through serve

`--fast` is `dynaspec generate --static --draft-quantize w4a8` (the bf16 target on the
bit-exact kernels, the pair's draft in 4 bits; a `--draft` in its own dtype, unless
`--draft-quantize` says); `--static`, `--draft-quantize` and the other fast-path flags may
be given one by one instead. A fixed schedule (default `constant`)
keeps the drafted tokens per round the same in both modes, so the acceptance is compared like
for like; `adaptive` reports what the adaptive rule makes of each. `--batch 1,4` also decodes
the prompts 4 at a time (every row with the seed: each row's text must be its prompt alone's),
and `--server-clients 4` sends every prompt and seed through `dynaspec serve` from 4
concurrent clients (eval/coupling_serve.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from dynaspec.core.keyed import SEED_MODES
from dynaspec.errors import ConfigError
from dynaspec.generation import generate

SOURCES = ("model", "lookup", "hybrid")
# how a draft with another tokenizer drafts here: over the tokens both tokenizers share, the
# one way such a draft samples (through text, "string", is greedy only)
CROSS_METHOD = "intersection"


@dataclass
class Tally:
    """One seed mode's totals over the runs of one setting (or of all)."""

    runs: int = 0
    rounds: int = 0  # rounds that drafted
    drafted: int = 0
    accepted: int = 0
    new_tokens: int = 0
    seconds: float = 0.0
    differs_from_alone: int = 0  # keyed texts unlike the target alone's (0 when bit-exact)

    def add(self, out: Any, seconds: float, prompt_length: int) -> None:
        drafting = [r for r in out.stats.rounds if r.num_drafted]
        self.runs += 1
        self.rounds += len(drafting)
        self.drafted += sum(r.num_drafted for r in drafting)
        self.accepted += sum(r.num_accepted for r in drafting)
        self.new_tokens += out.sequences.shape[1] - prompt_length
        self.seconds += seconds

    def add_rows(self, rows: list[list[int]], out: Any, seconds: float) -> None:
        """One call's rows (their new tokens), its output's rounds and its time."""
        drafting = [r for r in out.stats.rounds if r.num_drafted]
        self.runs += len(rows)
        self.rounds += len(drafting)
        self.drafted += sum(r.num_drafted for r in drafting)
        self.accepted += sum(r.num_accepted for r in drafting)
        self.new_tokens += sum(len(row) for row in rows)
        self.seconds += seconds

    def merge(self, other: Tally) -> None:
        for name in asdict(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def summary(self) -> dict[str, float]:
        return {
            "acceptance": self.accepted / max(self.drafted, 1),
            "accepted_per_round": self.accepted / max(self.rounds, 1),
            "tokens_per_s": self.new_tokens / max(self.seconds, 1e-9),
        }

    def record(self) -> dict[str, Any]:
        return {**asdict(self), **self.summary()}


@dataclass(frozen=True)
class Setting:
    """One way to draft: the source, the most tokens a round, the schedule."""

    source: str  # "model", "lookup" (prompt lookup alone) or "hybrid" (both)
    lookahead: int
    schedule: str

    @property
    def label(self) -> str:
        return f"{self.source}/{self.schedule}/{self.lookahead}"

    def options(self, pair: Any, prompt_lookup: int) -> tuple[Any, dict[str, Any]]:
        """(the pair's draft model or None, generate()'s drafting keywords) for this setting
        (with a draft of another tokenizer, its tokenizers: `draft_texts`)."""
        lookup = {"prompt_lookup_num_tokens": prompt_lookup} if self.source != "model" else {}
        keywords = {
            "num_assistant_tokens": self.lookahead,
            "num_assistant_tokens_schedule": self.schedule,
            **lookup,
        }
        if self.source == "lookup":
            return None, keywords
        return pair.draft, {**keywords, **draft_texts(pair)}


def draft_texts(pair: Any) -> dict[str, Any]:
    """generate()'s keywords for a pair whose draft keeps a tokenizer of its own
    (`draft_tokenizer`, --cross-tokenizer): both tokenizers, and the draft drafting over the
    tokens they share (CROSS_METHOD); {} for a draft of the target's tokenizer."""
    own = getattr(pair, "draft_tokenizer", None)
    if own is None:
        return {}
    texts = {"tokenizer": pair.tokenizer, "assistant_tokenizer": own}
    return {**texts, "cross_tokenizer": CROSS_METHOD}


@dataclass
class Measured:
    """Every setting's tallies per mode, the target alone's, and the keyed runs that differ."""

    settings: dict[str, dict[str, Tally]] = field(default_factory=dict)
    alone: Tally = field(default_factory=Tally)
    differences: list[dict[str, Any]] = field(default_factory=list)
    # the target alone's new tokens per (prompt, seed)
    expected: dict[tuple[int, int], list[int]] = field(default_factory=dict)

    def totals(self) -> dict[str, Tally]:
        total = {mode: Tally() for mode in SEED_MODES}
        for tallies in self.settings.values():
            for mode, tally in tallies.items():
                total[mode].merge(tally)
        return total


def first_difference(a: list[int], b: list[int]) -> int:
    """The first index where two token lists part (the shorter one's length if one is a
    prefix of the other)."""
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def measure(
    pair: Any,
    prompts: list[torch.Tensor],
    seeds: int,
    sampling: dict[str, Any],
    settings: list[Setting],
    modes: tuple[str, ...] = SEED_MODES,
    prompt_lookup: int = 32,
    batch_sizes: tuple[int, ...] = (1,),
) -> Measured:
    """Each setting in each mode over every prompt and seed (the order of the modes turns),
    alone and in batches of each size (consecutive prompts, every row with the same seed);
    each keyed row's text compared with its prompt's target alone's with that seed (decoded
    once, first)."""
    measured = Measured()
    expected = measured.expected
    for index, ids in enumerate(prompts):
        for seed in range(seeds):
            start = time.perf_counter()
            alone = generate(pair.target, None, ids, seed=seed, **sampling)
            measured.alone.add(alone, time.perf_counter() - start, ids.shape[1])
            expected[index, seed] = alone.sequences[0, ids.shape[1] :].tolist()
    for size in batch_sizes:
        labels = {s: s.label + (f"/b{size}" if size > 1 else "") for s in settings}
        measured.settings.update({labels[s]: {m: Tally() for m in modes} for s in settings})
        groups = [list(range(i, min(i + size, len(prompts)))) for i in range(0, len(prompts), size)]
        for number, group in enumerate(groups):
            batch = _batch(pair, [prompts[i] for i in group])
            for seed in range(seeds):
                for setting in settings:
                    turn = modes if (number + seed) % 2 == 0 else modes[::-1]
                    for mode in turn:
                        texts = _decode(pair, batch, seed, mode, sampling, setting, prompt_lookup)
                        tally = measured.settings[labels[setting]][mode]
                        tally.add_rows(*texts)
                        if mode != "keyed":
                            continue
                        for index, got in zip(group, texts[0], strict=True):
                            if got != expected[index, seed]:
                                tally.differs_from_alone += 1
                                at = first_difference(got, expected[index, seed])
                                where = {"prompt": index, "seed": seed, "setting": labels[setting]}
                                measured.differences.append({**where, "new_token": at})
            done = f"{number + 1}/{len(groups)} groups of {size}"
            print(f"coupling: {done} ({len(settings)} settings x {seeds} seeds)", file=sys.stderr)
    return measured


def _batch(pair: Any, rows: list[torch.Tensor]) -> dict[str, Any]:
    """generate()'s input for `rows`: one prompt as it is, several left-padded."""
    if len(rows) == 1:
        return {"input_ids": rows[0]}
    from dynaspec.prompts import left_padded

    pad = pair.tokenizer.pad_token_id if pair.tokenizer.pad_token_id is not None else 0
    ids, mask = left_padded(rows, pad)
    return {"input_ids": ids, "attention_mask": mask, "pad_token_id": pad}


def _decode(
    pair: Any,
    batch: dict[str, Any],
    seed: int,
    mode: str,
    sampling: dict[str, Any],
    setting: Setting,
    prompt_lookup: int,
) -> tuple[list[list[int]], Any, float]:
    """(each row's new tokens, the output, seconds) of one seeded call: every row `seed`."""
    draft, drafting = setting.options(pair, prompt_lookup)
    ids = batch["input_ids"]
    rows = ids.shape[0]
    seeds = seed if rows == 1 else [seed] * rows
    start = time.perf_counter()
    out = generate(pair.target, draft, **batch, seed=seeds, seed_mode=mode, **sampling, **drafting)
    seconds = time.perf_counter() - start
    stats = out.row_stats or (out.stats,)
    new = [
        out.sequences[r, ids.shape[1] :].tolist()[: stats[r].summary().new_tokens]
        for r in range(rows)
    ]
    return new, out, seconds


def _listed(text: str, flag: str, cast: Any = str) -> list[Any]:
    try:
        values = [cast(part.strip()) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise ConfigError(f"{flag} {text!r}: give a comma-separated list") from error
    if not values:
        raise ConfigError(f"{flag} {text!r}: give at least one value")
    return values


def settings_from(args: argparse.Namespace) -> list[Setting]:
    """The settings of --settings (SOURCE/SCHEDULE/LOOKAHEAD, comma-separated), else every
    (source, lookahead, schedule) of --source, --lookahead and --schedule; checked."""
    if args.settings:
        return [_setting(text) for text in _listed(args.settings, "--settings")]
    sources = _listed(args.source, "--source")
    lookaheads = _listed(args.lookahead, "--lookahead", int)
    schedules = _listed(args.schedule, "--schedule")
    _check_names(sources, schedules)
    if min(lookaheads) < 1:
        raise ConfigError(f"--lookahead {args.lookahead!r}: give counts >= 1")
    return [Setting(s, k, p) for s in sources for k in lookaheads for p in schedules]


def _setting(text: str) -> Setting:
    """One --settings entry, SOURCE/SCHEDULE/LOOKAHEAD (e.g. hybrid/adaptive/20)."""
    parts = text.split("/")
    if len(parts) != 3 or not parts[2].isdigit() or int(parts[2]) < 1:
        raise ConfigError(
            f"--settings {text!r}: write SOURCE/SCHEDULE/LOOKAHEAD, e.g. hybrid/adaptive/20"
        )
    try:
        _check_names([parts[0]], [parts[1]])
    except ConfigError as error:
        raise ConfigError(f"--settings {text!r}: {error}") from None
    return Setting(parts[0], int(parts[2]), parts[1])


def _check_names(sources: list[str], schedules: list[str]) -> None:
    from dynaspec.policies import SCHEDULES

    for source in sources:
        if source not in SOURCES:
            raise ConfigError(f"--source {source!r}: choose among {', '.join(SOURCES)}")
    for schedule in schedules:
        if schedule not in SCHEDULES:
            raise ConfigError(f"--schedule {schedule!r}: choose among {', '.join(SCHEDULES)}")


def check_draft(args: argparse.Namespace) -> None:
    """--draft names a model for a named pair's target; --cross-tokenizer acts on it."""
    if args.cross_tokenizer and args.draft is None:
        raise ConfigError("--cross-tokenizer acts on --draft: name the draft (e.g. smollm2-135m)")
    if args.draft is not None and args.pair.strip().lower() == "tiny":
        raise ConfigError(
            "--draft replaces the draft of a named pair (e.g. --pair qwen2.5-coder); the tiny "
            "pair has its own: drop --draft"
        )


def modes_from(text: str) -> tuple[str, ...]:
    modes = tuple(_listed(text, "--modes"))
    if not modes or any(mode not in SEED_MODES for mode in modes):
        raise ConfigError(f"--modes {text!r}: choose among {', '.join(SEED_MODES)}")
    return modes


def batch_sizes_from(text: str) -> tuple[int, ...]:
    sizes = tuple(_listed(text, "--batch", int))
    if min(sizes) < 1:
        raise ConfigError(f"--batch {text!r}: give batch sizes >= 1")
    return sizes


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    from dynaspec.models.arguments import add_fast_arguments

    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pair", default="tiny", help="a pair preset, or tiny (default)")
    parser.add_argument(
        "--draft",
        default=None,
        help="another draft for the pair's target (a preset, folder, GGUF or hub id); with "
        "--cross-tokenizer one of another tokenizer, e.g. smollm2-135m",
    )
    parser.add_argument(
        "--cross-tokenizer",
        action="store_true",
        help="--draft keeps its own tokenizer and drafts over the tokens both tokenizers share "
        "(cross_tokenizer='intersection', the one way such a draft samples)",
    )
    parser.add_argument(
        "--draft-noise", type=float, default=None, help="tiny: the draft's weight noise"
    )
    parser.add_argument("--dtype", default=None, help="as generate's (default: the machine's)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--fast",
        action="store_true",
        help="the bit-exact fast path: --static --draft-quantize w4a8 (a bf16 target on the "
        "static kernels, the draft in 4 bits), as dynaspec generate runs it; a --draft on "
        "the static path in its dtype unless --draft-quantize says",
    )
    add_fast_arguments(parser)
    parser.add_argument("--task", default="grounded,open-ended,code")
    parser.add_argument("--n", type=int, default=2, help="prompts per task")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per prompt (0, 1, ...)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--source", default="model", help="draft sources, comma-separated: model,lookup,hybrid"
    )
    parser.add_argument("--schedule", default="constant", help="schedules, comma-separated")
    parser.add_argument(
        "--lookahead", default="5", help="num_assistant_tokens values, comma-separated"
    )
    parser.add_argument(
        "--settings",
        default=None,
        help="instead of the three lists above: SOURCE/SCHEDULE/LOOKAHEAD entries, "
        "comma-separated (e.g. model/constant/5,hybrid/adaptive/20)",
    )
    parser.add_argument(
        "--prompt-lookup", type=int, default=32, help="lookup/hybrid: prompt_lookup_num_tokens"
    )
    parser.add_argument(
        "--modes", default=",".join(SEED_MODES), help="seed modes: keyed,stream or keyed alone"
    )
    parser.add_argument(
        "--batch",
        default="1",
        help="batch sizes, comma-separated (e.g. 1,4): consecutive prompts decoded together, "
        "each row with the seed; each row's keyed text checked against its prompt alone's",
    )
    parser.add_argument(
        "--server-clients",
        type=int,
        default=0,
        help="also send every prompt and seed through `dynaspec serve` (in this process) from "
        "this many concurrent clients, keyed: each text must be the target alone's (0: not)",
    )
    parser.add_argument("--out", default=None, help="a JSON file for the record")
    args = parser.parse_args(argv)
    if args.fast:  # a --draft as loaded (w4a8 needs widths SmolLM2 lacks): --draft-quantize
        args.static = True
        if args.draft is None:
            args.draft_quantize = args.draft_quantize or "w4a8"
    return args


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


def _pair(args: argparse.Namespace) -> Any:
    """The named preset or the tiny pair (its draft as noisy as asked), or the preset's
    target with --draft (keeping its own tokenizer with --cross-tokenizer: the result's
    `draft_tokenizer`), on the fast path the flags ask for."""
    from dynaspec.models.arguments import fast_options
    from dynaspec.models.loading import load_model_set
    from dynaspec.models.presets import get_pair_preset
    from dynaspec.models.tiny import TinyPairConfig

    tiny = None if args.draft_noise is None else TinyPairConfig(draft_noise=args.draft_noise)
    options = {"dtype": args.dtype, "threads": args.threads, **fast_options(args)}
    if args.draft is None:
        return load_model_set(args.pair, tiny=tiny, **options)
    target = get_pair_preset(args.pair).target
    cross = args.cross_tokenizer
    return load_model_set(target=target, draft=args.draft, other_tokenizer=cross, **options)


def bit_exact(target: Any) -> bool:
    """Whether the target alone's keyed text must be met token for token: a static bf16
    target on the bit-exact kernels, or a float32 one."""
    if getattr(target, "bit_exact", False):
        return True
    dtype = getattr(target, "dtype", None)
    return dtype == torch.float32


def _warm_up(pair: Any, ids: torch.Tensor, settings: list[Setting], prompt_lookup: int) -> None:
    """One short untimed call of each draft source, so that no timing pays a first call."""
    sampling = {"do_sample": True, "max_new_tokens": 8}
    generate(pair.target, None, ids, seed=0, **sampling)
    for source in {s.source for s in settings}:
        draft, drafting = Setting(source, 4, "constant").options(pair, prompt_lookup)
        generate(pair.target, draft, ids, seed=0, **sampling, **drafting)


def record_of(measured: Measured, modes: tuple[str, ...]) -> dict[str, Any]:
    """The per-setting and overall tallies, the ratios keyed / stream where both ran."""

    def block(tallies: dict[str, Tally]) -> dict[str, Any]:
        out: dict[str, Any] = {mode: tallies[mode].record() for mode in modes}
        if set(SEED_MODES) <= set(modes):
            keyed, stream = (tallies[mode].summary() for mode in SEED_MODES)
            out["keyed_over_stream"] = {k: keyed[k] / max(stream[k], 1e-9) for k in keyed}
        return out

    return {
        "settings": {label: block(t) for label, t in measured.settings.items()},
        "total": block(measured.totals()),
        "alone": measured.alone.record(),
        "keyed_runs": measured.totals()["keyed"].runs if "keyed" in modes else 0,
        "keyed_differing": len(measured.differences),
        "differences": measured.differences,
    }


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        settings, modes = settings_from(args), modes_from(args.modes)
        sizes = batch_sizes_from(args.batch)
        check_draft(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    pair = _pair(args)
    sampling = {
        "do_sample": True,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
    }
    prompts = _prompts(pair, args.task, args.n)
    _warm_up(pair, prompts[0], settings, args.prompt_lookup)
    measured = measure(
        pair, prompts, args.seeds, sampling, settings, modes, args.prompt_lookup, sizes
    )
    exact = bit_exact(pair.target)
    server = None
    if args.server_clients > 0:
        from dynaspec.eval.coupling_serve import serve_check

        expected = measured.expected
        server = serve_check(
            pair, prompts, args.seeds, sampling, expected, args.server_clients, args.prompt_lookup
        ).record()
    record = {
        "pair": args.pair,
        "draft": args.draft,
        "cross_tokenizer": draft_texts(pair).get("cross_tokenizer"),
        "draft_noise": args.draft_noise,
        "fast": {k: getattr(args, k) for k in ("static", "quantize", "draft_quantize")},
        "dtype": str(getattr(pair.target, "dtype", args.dtype)),
        "bit_exact": exact,
        "sampling": sampling,
        "prompt_lookup": args.prompt_lookup,
        "task": args.task,
        "prompts": len(prompts),
        "seeds": args.seeds,
        "batch_sizes": sizes,
        **record_of(measured, modes),
        "server": server,
    }
    print(json.dumps({k: v for k, v in record.items() if k != "differences"}, indent=1))
    runs, differing = record["keyed_runs"], record["keyed_differing"]
    failed = ""
    if server is not None:  # a request the server failed proves nothing: it counts as one
        runs, differing = runs + server["requests"], differing + server["differing"]
        differing += server["failed"]
        failed = f", {server['failed']} failed in the server" if server["failed"] else ""
    print(
        f"coupling: {differing} of {runs} keyed texts differ from the target alone's{failed} "
        f"({'bit-exact target: must be 0' if exact else 'not bit-exact: near-ties may flip'})",
        file=sys.stderr,
    )
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(record, handle, indent=1)
    return 1 if differing and exact else 0


if __name__ == "__main__":
    raise SystemExit(main())
