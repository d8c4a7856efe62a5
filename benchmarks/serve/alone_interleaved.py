"""One request at a time, generate against the server, alternating in one process.

The models are loaded once (the CLI's loader and flags: FLAGS) and serve both: `generate()`
with the options `dynaspec generate` passes, and the app `dynaspec serve` builds
(`serve.run.build_app`, uvicorn on a thread, its engine thread) asked by the official
`openai` client. Each prompt runs REPEAT times, generate then the server, after a warm-up
prompt for both; per prompt the best of each (generate: its stats' wall time, prefill
included; the server: the client's wall time), so that load from other work on a shared
machine falls on both alike. Prints per prompt the tokens per second and the ratio, and
whether the texts are the same.

Both run slower here than in their own processes: generate() runs on this thread and the
server's model on its engine thread, and with two threads that run torch's parallel
operations libgomp all but stops spinning on a 2-core machine (serve/engine.py's docstring).
So this compares the two paths under the same handicap; benchmarks/serve/alone.sh compares
the commands as users run them.

    python benchmarks/serve/alone_interleaved.py            # REPEAT=3 by default
"""

from __future__ import annotations

import os
import statistics
import time

import openai

from dynaspec.cli import build_parser
from dynaspec.generation import generate
from dynaspec.models.arguments import apply_fast_choice, fast_options, load_named_from_arguments
from dynaspec.prompts import render_prompt
from dynaspec.serve.args import spec
from dynaspec.serve.config import ServeConfig
from dynaspec.serve.run import build_app, in_thread

FLAGS = ["--static", "--draft-quantize", "w4a8", "--prompt-lookup", "32"]
PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Explain what a mutex is in two sentences.",
    "Write a bash one-liner that counts lines in all .py files.",
    "What does git rebase do?",
]
NEW = 128


def main() -> None:
    repeat = int(os.environ.get("REPEAT", "3"))
    args = build_parser().parse_args(["serve", *FLAGS, "--suffix-cache", "0"])
    apply_fast_choice(args)
    models = load_named_from_arguments(args, **fast_options(args))
    target, draft, tokenizer = models.target, models.draft, models.tokenizer
    config = ServeConfig(model_name="alone", max_batch=args.max_batch, suffix_cache_mb=0)
    app = build_app(target, draft, tokenizer, config, spec(args), args.prompt_lookup)
    options = dict(  # what `dynaspec generate` passes for these flags
        num_assistant_tokens=args.num_assistant_tokens,
        assistant_confidence_threshold=args.threshold,
        num_assistant_tokens_schedule=args.schedule,
        tokenizer=tokenizer,
        prompt_lookup_num_tokens=args.prompt_lookup,
        max_new_tokens=NEW,
    )
    with in_thread(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=600)

        def served(text: str) -> tuple[str, int, float]:
            started = time.perf_counter()
            answer = client.chat.completions.create(
                model="alone",
                max_tokens=NEW,
                temperature=0,
                messages=[{"role": "user", "content": text}],
            )
            seconds = time.perf_counter() - started
            return answer.choices[0].message.content or "", answer.usage.completion_tokens, seconds

        def alone(text: str) -> tuple[str, int, float]:
            ids = render_prompt(tokenizer, text, chat=True)
            out = generate(target, draft, ids, **options)
            new = out.sequences[0, ids.shape[1] :]
            summary = out.stats.summary()
            decoded = tokenizer.decode(new, skip_special_tokens=True)
            return decoded, summary.new_tokens, summary.wall_time_s

        alone("Say hi.")
        served("Say hi.")
        ratios = []
        for text in PROMPTS:
            runs = [(alone(text), served(text)) for _ in range(repeat)]
            gen_rate = max(tokens / seconds for (_, tokens, seconds), _ in runs)
            srv_rate = max(tokens / seconds for _, (_, tokens, seconds) in runs)
            same = all(a[0].strip() == s[0].strip() for a, s in runs)
            ratios.append(srv_rate / gen_rate)
            print(
                f"{text[:40]:40} generate {gen_rate:6.2f} serve {srv_rate:6.2f} tok/s  "
                f"serve/generate {srv_rate / gen_rate:.2f}  "
                f"{'same text' if same else 'TEXT DIFFERS'}",
                flush=True,
            )
    print(f"median serve/generate {statistics.median(ratios):.2f} (best of {repeat} each)")


if __name__ == "__main__":
    main()
