# per-round plans and outcomes of the hybrid (the code as it is), with the copy rule's numbers
# for each round that had a match on offer: python trace.py task:seed:prompt ...
import sys, time
from dynaspec import load_pair, generate
from dynaspec.eval import data
from dynaspec.eval.hf_peer import HFPeer
from dynaspec.policies import source_plan as S
import dynaspec.policies.adaptive as A
pair = load_pair("qwen2.5-coder", draft_quantize="w4a8")
tok = pair.tokenizer
eos = sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")})
orig = S.plan_with_copy
notes = []
def spy(policy, options, remaining, alone, floor=1.0):
    plan = orig(policy, options, remaining, alone, floor)
    rho = max(policy.rate, floor)
    ac = policy.calibration.continuation_acceptance()
    probs = policy.lookup.prefix_probs(options.agreement, options.num_copy, ac)
    copied = S._copy_length(probs, rho, policy)
    exp = sum(probs[:copied]) if copied else 0
    value = exp - rho * (policy.costs.verify_cost(copied + 1) - 1.0) if copied else 0
    carry = S._carry_on_value(policy, probs[copied - 1], copied, options.catchup, exp, remaining, rho) if copied else 0
    notes.append(f"Q={[round(q,2) for q in probs[:6]]} rates={[round(r,2) for r in policy.lookup.rates(ac)]} copied={copied} exp={exp:.2f} V1={policy.costs.verify_cost(2):.2f} V33={policy.costs.verify_cost(33):.2f} value={value:.2f} carry={carry:.2f} start={S._start_cost(policy, options):.2f} "
                 f"ret={plan.copy},{plan.model} agr={options.agreement} n={options.num_copy} Q1={probs[0]:.2f} Qn={probs[-1]:.2f} alone={alone.model} G0={policy.model_value(floor=rho):.2f} a1={policy.calibration.first_token_acceptance():.2f} ac={ac:.2f} rho={rho:.2f}")
    return plan
A.plan_with_copy = spy
import dynaspec.core.loop as Lp
_draft = Lp.draft
rounds_notes = []
def d(drafter, tokens, policy, sampler, max_draft, eos_ids):
    before = len(notes)
    out = _draft(drafter, tokens, policy, sampler, max_draft, eos_ids)
    rounds_notes.append(notes[before] if len(notes) > before else "")
    return out
Lp.draft = d
for spec in sys.argv[1:]:
    task, seed, key = spec.split(":", 2)
    p = [p for p in data.load_prompts(task, 4, int(seed)) if p.id.startswith(key)][0]
    ids = data.render_prompt(tok, p.text, chat=True)
    generate(pair.target, pair.draft, ids[:, :32], max_new_tokens=8, prompt_lookup_num_tokens=32)
    for rep in range(2):
        t = time.perf_counter()
        o = HFPeer(pair.target).generate(ids, max_new_tokens=128, eos_token_id=eos, pad_token_id=eos[0], prompt_lookup_num_tokens=10)
        hf = time.perf_counter() - t
        notes.clear(); rounds_notes.clear()
        t = time.perf_counter()
        out = generate(pair.target, pair.draft, ids, max_new_tokens=128, eos_token_id=eos, prompt_lookup_num_tokens=32)
        w = time.perf_counter() - t
    print(f"== {p.id} prompt {ids.shape[1]} hybrid {w:.2f}s rounds {len(out.stats.rounds)}  hf {hf:.2f}s fwd {o.target_forwards}  ratio {hf/w:.2f}")
    pos = 0
    for i, r in enumerate(out.stats.rounds):
        note = rounds_notes[i] if i < len(rounds_notes) else ""  # the round's offer, if any
        print(f"{i:2d} @{pos:3d} plan(c={r.plan.copy},m={r.plan.model},g={r.plan.guess}) cp={r.num_copied} dr={r.num_drafted} acc={r.num_accepted} cu={r.catchup} df={r.draft_forwards} dt={r.draft_time_s:.3f} tt={r.target_time_s:.3f} {r.stop_reason.name} {note}")
        pos += r.num_emitted
    print(repr(tok.decode(out.sequences[0, ids.shape[1]:])[:600]))
