"""`dynaspec oracle`: how long the draft stays right, round by round, on real text.

The *oracle lookahead* of a speculative round (docs/design/architecture.md ("The oracle
lookahead")) is the number of tokens the draft proposes before its first disagreement with
the target, plus one: the *agreeing run* r, then the first wrong token, which the target
replaces with its own. A policy that knew r in advance would draft exactly r + 1 tokens
every round: no round ends with correct draft tokens left undrafted, and no draft token is
spent past the one that must be checked (Mamou et al. 2024, "Dynamic Speculation Lookahead
Accelerates Speculative Decoding of Large Language Models"). How much r varies is why a
fixed lookahead wastes work.

Everything is measured through the one decoding loop (`dynaspec.core.loop.decode`), per prompt:

1. *reference*: the target alone, greedy (`generate(target, None, ...)`).
2. *real oracle run*: `generate(target, draft, policy=OraclePolicy(reference))`. The draft
   stops right after its first token that differs from the reference, so round i drafts
   r_i + 1 tokens and the target accepts r_i of them. Its output must equal the reference.
3. *draft trace*: one draft forward over the whole reference gives, at every new-token
   position, the draft's teacher-forced greedy token and its probability (confidence).
4. *replays*: `ReplayTarget` and `ReplayDraft` are `ModelAdapter`s that replay 1 and 3 at no
   model cost; the same loop runs over them with every policy (constant 1..10, dynamic at
   thresholds 0.1..0.9, heuristic, adaptive, oracle), which gives the exact round structure
   and forward counts each policy has on the same text. The replayed oracle must reproduce
   step 2 round for round: the consistency check of the replay.

The one approximation: within a round, after the draft's first wrong token, the draft
conditions on text that the reference never contains, so its true proposals there are
unknown. They are rejected whatever they are (the target accepts a prefix only), so the
forward counts of policies that do not look at the confidence (constant, heuristic, oracle)
are exact; a confidence-driven policy (dynamic, adaptive) needs the confidence of those
tokens to know when it stops, and the replay uses the draft's teacher-forced confidence at
the same position instead. The adaptive policy also learns what things cost from the
round's times, which a replay does not have: `SimulatedTimePolicy` gives it the cost model's
times instead (`dynaspec.eval.cost_model`).

Numerics: the trace is one forward over the whole sequence, a real run feeds tokens a few at
a time; in bf16 the two can differ in the last bit and flip an argmax at a near-tie, which
the consistency check counts (in fp32 the two agree exactly on the tiny test models).

Files: `records` (what is recorded per prompt), `measure` (steps 1-3 with the real models),
`replay` (step 4: the replay adapters and the loop over them), `methods` (the policies
compared), `run` (the CLI: `add_oracle_arguments` in `args`, `run_oracle`), `report`,
`markdown` and `plots` (the JSON summary, the markdown report and the PNG plots).
"""
