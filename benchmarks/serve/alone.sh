#!/usr/bin/env bash
# One request at a time: dynaspec generate vs dynaspec serve, the same flags, the same 4 prompts
# (after a warm-up prompt), each REPEAT times in each pass; per prompt the median tok/s of
# each pass and their ratio, then the median ratio. generate's tok/s is its stats' (the call,
# prefill included); serve's the openai client's wall time (HTTP, template and prefill included).
# The passes run one after the other in two processes: on a machine shared with other work
# their ratio follows the load (benchmarks/serve/alone_interleaved.py alternates the two in
# one process instead).
set -u
FLAGS="--static --draft-quantize w4a8 --prompt-lookup 32"
OUT=${OUT:-/tmp/svg}; REPEAT=${REPEAT:-3}; mkdir -p $OUT
printf '%s\n' "Write a Python function that checks whether a number is prime." \
  "Explain what a mutex is in two sentences." "Write a bash one-liner that counts lines in all .py files." \
  "What does git rebase do?" > $OUT/prompts.txt
{ echo "Say hi."; for r in $(seq 1 $REPEAT); do cat $OUT/prompts.txt; done; } > $OUT/runs.txt
dynaspec generate $FLAGS --max-new-tokens 128 --prompts-file $OUT/runs.txt > $OUT/generate.jsonl 2> $OUT/generate.err
dynaspec serve $FLAGS --suffix-cache 0 --port 8011 > $OUT/serve.log 2>&1 &
SERVER=$!
for i in $(seq 1 300); do curl -sf http://127.0.0.1:8011/health >/dev/null 2>&1 && break; sleep 2; done
python - "$OUT" <<'PY'
import json, statistics, sys, time, openai
out = sys.argv[1]
c = openai.OpenAI(base_url="http://127.0.0.1:8011/v1", api_key="none", timeout=600)
runs = open(f"{out}/runs.txt").read().splitlines()
rows = []
for i, p in enumerate(runs):
    t = time.perf_counter()
    r = c.chat.completions.create(model="qwen2.5-coder", max_tokens=128, temperature=0,
                                  messages=[{"role": "user", "content": p}])
    s = time.perf_counter() - t
    rows.append({"index": i, "prompt": p, "tokens": r.usage.completion_tokens, "seconds": s,
                 "tok_s": r.usage.completion_tokens / s, "text": r.choices[0].message.content,
                 "stats": r.model_extra.get("dynaspec")})
with open(f"{out}/serve.jsonl", "w") as f:
    for row in rows: f.write(json.dumps(row) + "\n")
gen = [json.loads(l) for l in open(f"{out}/generate.jsonl")]
ratios = []
for prompt in open(f"{out}/prompts.txt").read().splitlines():
    g = [x for x in gen[1:] if x["prompt"] == prompt]
    s = [x for x in rows[1:] if x["prompt"] == prompt]
    g_rate = statistics.median(x["stats"]["tokens_per_s"] for x in g)
    s_rate = statistics.median(x["tok_s"] for x in s)
    same = all(a["text"].strip() == (b["text"] or "").strip() for a, b in zip(g, s))
    ratios.append(s_rate / g_rate)
    print(f"{prompt[:40]:40} generate {g_rate:6.2f} serve {s_rate:6.2f} tok/s  "
          f"serve/generate {s_rate / g_rate:.2f}  {'same text' if same else 'TEXT DIFFERS'}")
print(f"median serve/generate {statistics.median(ratios):.2f} (medians of {len(g)} runs each)")
PY
kill $SERVER; wait $SERVER 2>/dev/null
