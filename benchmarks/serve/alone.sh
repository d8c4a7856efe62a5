#!/usr/bin/env bash
# One request at a time: dynaspec generate vs dynaspec serve, the same flags, the same 4 prompts.
set -u
FLAGS="--static --draft-quantize w4a8 --prompt-lookup 32"
OUT=${OUT:-/tmp/svg}; mkdir -p $OUT
printf '%s\n' "Say hi." "Write a Python function that checks whether a number is prime." \
  "Explain what a mutex is in two sentences." "Write a bash one-liner that counts lines in all .py files." \
  "What does git rebase do?" > $OUT/prompts.txt
dynaspec generate $FLAGS --max-new-tokens 128 --prompts-file $OUT/prompts.txt > $OUT/generate.jsonl 2> $OUT/generate.err
dynaspec serve $FLAGS --suffix-cache 0 --port 8011 > $OUT/serve.log 2>&1 &
SERVER=$!
for i in $(seq 1 300); do curl -sf http://127.0.0.1:8011/health >/dev/null 2>&1 && break; sleep 2; done
python - "$OUT" <<'PY'
import json, sys, time, openai
out = sys.argv[1]
c = openai.OpenAI(base_url="http://127.0.0.1:8011/v1", api_key="none", timeout=600)
prompts = open(f"{out}/prompts.txt").read().splitlines()
rows = []
for i, p in enumerate(prompts):
    t = time.perf_counter()
    r = c.chat.completions.create(model="qwen2.5-coder", max_tokens=128, temperature=0,
                                  messages=[{"role": "user", "content": p}])
    s = time.perf_counter() - t
    rows.append({"index": i, "prompt": p, "tokens": r.usage.completion_tokens, "seconds": s,
                 "tok_s": r.usage.completion_tokens / s, "text": r.choices[0].message.content})
with open(f"{out}/serve.jsonl", "w") as f:
    for row in rows: f.write(json.dumps(row) + "\n")
gen = [json.loads(l) for l in open(f"{out}/generate.jsonl")]
for g, s in zip(gen[1:], rows[1:]):
    gts = g["stats"]
    print(g["index"], "generate", round(gts["tokens_per_s"], 2), "serve", round(s["tok_s"], 2),
          "same text" if g["text"].strip() == (s["text"] or "").strip() else "text differs")
PY
kill $SERVER; wait $SERVER 2>/dev/null
