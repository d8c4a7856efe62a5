"""dynaspec's drafters and lookahead rules as vLLM proposers (`speculative_config`'s
`custom_class` method: vLLM imports the class in each worker, builds it with its
`VllmConfig`, and calls `propose` once per step; docs/vllm.md).

    propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu) -> one list per row

Each call is one round for every row that just committed tokens: the rows are matched to
their requests (requests.py), what the step judged is learned (steps.py), and each request
gets the plan of dynaspec's policy for it, drafted by dynaspec's drafter, cut to vLLM's
`num_speculative_tokens`. Nothing proposed (an empty list) where drafting does not pay.

With a suffix cache (DYNASPEC_VLLM_SUFFIX_CACHE MB, or `suffix_cache=`), a request may also
copy what earlier requests' texts went on with after the same context (drafters/suffix.py);
a request's text (its prompt and output) is added when it leaves the batch. vLLM tells a
proposer nothing of users or keys, so the cache is one scope for every request the process
serves (docs/vllm.md, "The suffix cache").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any

import numpy as np
import torch

import dynaspec.drafters as drafters
from dynaspec.backends.row_adapters import own_adapter
from dynaspec.compat.records import SamplingConfig
from dynaspec.core.protocols import Drafter, LookaheadPolicy
from dynaspec.core.request import Request
from dynaspec.core.sampling import TokenSampler
from dynaspec.drafters.prompt_lookup import LookupConfig, match_for
from dynaspec.drafters.suffix_cache import DEFAULT_SCOPE, SuffixCache, SuffixScope
from dynaspec.errors import ConfigError
from dynaspec.integrations.vllm.requests import Request as Tracked
from dynaspec.integrations.vllm.requests import RequestTracker, Row, Sent
from dynaspec.integrations.vllm.settings import ProposerSettings
from dynaspec.integrations.vllm.steps import StepCost, request_round, step_round
from dynaspec.policies import AdaptivePolicy, make_policy
from dynaspec.policies.lookup_acceptance import LookupAcceptance
from dynaspec.request import drafting_request


class DynaspecProposer:
    """What both proposers share: the rows' requests, the step's timing, the learning."""

    def __init__(
        self,
        vllm_config: Any = None,
        *,
        settings: ProposerSettings | None = None,
        clock: Callable[[], float] = perf_counter,
        suffix_cache: SuffixCache | None = None,
    ):
        if settings is None:
            settings = ProposerSettings.from_vllm(vllm_config)
        self.settings = settings
        self.clock = clock  # seconds; steps are timed between propose() calls
        if suffix_cache is None and settings.suffix_cache_mb > 0:
            suffix_cache = SuffixCache(settings.suffix_cache_mb)
        self.suffix_cache = suffix_cache  # every request's text, once it has left
        capacity = max(4 * settings.max_num_seqs, 64)
        self.tracker = RequestTracker(capacity=capacity, keep_texts=suffix_cache is not None)
        # adaptive: one set of estimates for the engine (its costs are the batch's); any
        # other schedule keeps its own state per request (the tracked request's `policy`)
        self.shared = AdaptivePolicy(settings.num_speculative_tokens)
        self.adaptive = settings.schedule == "adaptive"
        self._last_end: float | None = None  # when the previous propose() returned
        self.sampler = TokenSampler(SamplingConfig())  # greedy: vLLM takes no draft probs
        self._cost = StepCost()  # what it did
        self.stats = ProposerStats()

    # ---- vLLM's interface -------------------------------------------------------------
    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """vLLM hands over its target model; dynaspec's drafters do not need it."""

    def propose(
        self,
        sampled_token_ids: Sequence[Sequence[int]],
        num_tokens_no_spec: np.ndarray,
        token_ids_cpu: np.ndarray,
        *args: Any,
        **kwargs: Any,
    ) -> list[list[int]]:
        """At most num_speculative_tokens draft tokens per row (empty: none)."""
        started = self.clock()
        step_s = started - self._last_end if self._last_end is not None else 0.0
        rows = self.tracker.rows(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
        self._store_left()
        self._learn(rows, step_s)
        drafts: list[list[int]] = []
        forwards = catchup = 0
        for row in rows:
            if row is None:
                drafts.append([])
                continue
            self.stats.requests += row.new
            sent, used, fed = self.draft(row, self.sequence(row))
            forwards, catchup = forwards + used, max(catchup, fed)
            self.tracker.file(row, sent)
            drafts.append(list(sent.tokens))
            self.stats.add_proposal(len(sent.tokens))
        self._last_end = self.clock()
        self._cost = StepCost(self._last_end - started, forwards, catchup)
        return drafts

    def summary(self) -> dict[str, Any]:
        """The counts and the shared estimates: T(1) and the slope b of the fitted step line
        (seconds; steps.py), the rate in tokens per step, copied tokens' acceptance."""
        costs = self.shared.costs
        step_s = costs.step_time()
        slope_s = (costs.verify_cost(3) - costs.verify_cost(2)) * step_s
        return {
            **vars(self.stats),
            "acceptance": self.stats.acceptance,
            "step_s": step_s,
            "slope_s_per_token": slope_s,
            "rate_tokens_per_step": self.shared.rate,
            "draft_cost_steps": costs.draft_cost(),
        }

    # ---- what a proposer adds ------------------------------------------------------------
    def draft(self, row: Row, sequence: Request) -> tuple[Sent, int, int]:
        """The proposal for one row (its request's `sequence`), the draft forwards it ran and
        its catch-up."""
        raise NotImplementedError

    def new_drafter(self, tokens: torch.Tensor) -> Drafter | None:
        """The drafter of a request first seen with the committed `tokens` (T,)."""
        raise NotImplementedError

    # ---- shared -------------------------------------------------------------------------
    def sequence(self, row: Row) -> Request:
        """The row's request as dynaspec's Request (made on first sight: its drafter, policy
        and the proposer's sampler), as generate() and the batches draft from theirs."""
        tracked = row.request
        if tracked.sequence is None:
            tokens = torch.from_numpy(np.asarray(row.tokens, dtype=np.int64))
            tracked.sequence = drafting_request(
                tokens,
                self.sampler,
                self.new_drafter(tokens),
                self.policy(tracked),
                self.settings.eos_token_ids,
            )
        return tracked.sequence

    def policy(self, request: Tracked) -> LookaheadPolicy:
        """adaptive: the request's view of the shared estimates (RequestPolicy); another
        schedule: the request's own policy."""
        if request.policy is None:
            adaptive = self.adaptive
            request.policy = (
                RequestPolicy(self.shared) if adaptive else make_policy(self.settings.spec)
            )
        return request.policy

    @property
    def suffix_scope(self) -> SuffixScope | None:
        """The suffix cache's one scope (None: no cache)."""
        return None if self.suffix_cache is None else self.suffix_cache.scope(DEFAULT_SCOPE)

    def _store_left(self) -> None:
        """Adds the texts of the requests that left the batch to the suffix cache."""
        if self.suffix_cache is None:
            return
        for request in self.tracker.left:
            self.suffix_cache.add(request.text, DEFAULT_SCOPE)
            self.stats.stored += 1

    def _learn(self, rows: Sequence[Row | None], step_s: float) -> None:
        for row in rows:
            if row is None or row.outcome is None:
                continue
            record = request_round(row.outcome)
            self.stats.add_verdict(record.num_drafted, record.num_accepted)
            policy = self.policy(row.request)
            if isinstance(policy, RequestPolicy):
                policy.learn_tokens(record)  # the step's forward is learned once, below
            else:
                policy.update(record)
        step = step_round(rows, step_s, self._cost) if self.adaptive else None
        if step is not None:  # what the step's forward cost, learned once for all requests
            self.shared.learn_forwards(step, step.num_emitted)


class RequestPolicy(AdaptivePolicy):
    """The adaptive rule for one request: what the machine's steps cost, the engine's rate
    and the draft's calibration are the shared policy's, learned from every request; how
    often this request's copies are accepted is its own, from the prior up, as a fresh
    policy per generate() call learns it (what a summary's copies teach says little about
    a story's or a code edit's)."""

    def __init__(self, shared: AdaptivePolicy) -> None:  # no reset(): the estimates are shared
        self.shared = shared
        self.config = shared.config
        self.lookup = LookupAcceptance()
        self.suffix = LookupAcceptance(shared.config.suffix)  # the suffix cache's copies

    costs = property(lambda self: self.shared.costs)
    calibration = property(lambda self: self.shared.calibration)
    prober = property(lambda self: self.shared.prober)
    rate = property(lambda self: self.shared.rate)


class LookupProposer(DynaspecProposer):
    """Prompt lookup with dynaspec's copy rule: copy only the tokens expected to pay
    (policies/source_plan.py), nothing where no match does; with a suffix cache, the copy
    worth more of prompt lookup's and the cache's. Copies are point masses, so this is exact
    for greedy and sampled requests alike."""

    def __init__(self, vllm_config: Any = None, **kwargs: Any):
        super().__init__(vllm_config, **kwargs)
        config = LookupConfig(
            prompt_lookup_num_tokens=self.settings.num_speculative_tokens,
            max_matching_ngram_size=self.settings.ngram,
            match=match_for(self.settings.schedule),  # as generate() chooses
        )
        self.lookup = drafters.make_drafter(
            None,
            self.settings.vocab_size,
            self.settings.eos_token_ids,
            config,
            suffix=self.suffix_scope,
        )

    def new_drafter(self, tokens: torch.Tensor) -> Drafter | None:
        return self.lookup  # one for every request: it keeps nothing of a request

    def draft(self, row: Row, sequence: Request) -> tuple[Sent, int, int]:
        tokens = torch.from_numpy(np.asarray(row.tokens, dtype=np.int64))
        policy = sequence.policy
        options = sequence.drafter.offer(tokens)
        plan = policy.plan(options, None).within(self.settings.num_speculative_tokens)
        offer = options.chosen(plan.source)  # prompt lookup's copy or the suffix cache's
        copied = offer.copy[: plan.copy] if offer.copy is not None else tokens[:0]
        self.stats.add_copy(plan.source.value if copied.numel() else None, copied.numel())
        sent = Sent(
            step=self.tracker.step,
            tokens=tuple(copied.tolist()),
            plan=plan,
            agreement=offer.agreement if copied.numel() else 0,
            num_copied=copied.numel(),
            confidences=(1.0,) * copied.numel(),
        )
        return sent, 0, 0


class DraftModelProposer(DynaspecProposer):
    """A draft model (DYNASPEC_VLLM_DRAFT) with one cache per request, drafting greedily
    under dynaspec's policy for as long as it pays (with a suffix cache: after a copy from
    it, when the rule plans one). vLLM verifies the drafts as point masses:
    exact for every request; sampled requests accept less than they would with the draft's
    probabilities (vLLM takes none from a custom proposer)."""

    def __init__(self, vllm_config: Any = None, *, model: Any = None, **kwargs: Any):
        super().__init__(vllm_config, **kwargs)
        self.model = model if model is not None else _load_draft(self.settings)
        self.sampler = TokenSampler(SamplingConfig(), _device(self.model))

    def new_drafter(self, tokens: torch.Tensor) -> Drafter | None:
        """A draft model's drafter of its own (its cache) for a new request, or one forgotten
        while it was away, with the request's tokens read."""
        settings = self.settings
        drafter = drafters.make_drafter(
            own_adapter(self.model),  # a transformers model's adapter, or a fork of an adapter
            settings.vocab_size,
            settings.eos_token_ids,
            suffix=self.suffix_scope,
        )
        drafter.begin(tokens.view(1, -1))
        return drafter

    def draft(self, row: Row, sequence: Request) -> tuple[Sent, int, int]:
        tokens = torch.from_numpy(np.asarray(row.tokens, dtype=np.int64))
        drafter, policy = sequence.drafter, sequence.policy
        drafter.crop(tokens.numel() - 1)  # its cache: committed tokens only
        options = drafter.offer(tokens)
        plan = policy.plan(options, None).within(self.settings.num_speculative_tokens)
        if not plan.total:  # a copy is planned only where the suffix cache offers one
            return Sent(self.tracker.step, (), plan), 0, 0
        with torch.inference_mode():  # vLLM's runner calls in inference mode; tests do not
            eos = self.settings.eos_token_ids
            stopper = policy.stopper(plan)
            proposal = drafter.propose(tokens, options, plan, stopper, sequence.sampler, eos)
        self.stats.add_copy(plan.source.value if proposal.num_copied else None, proposal.num_copied)
        sent = Sent(
            step=self.tracker.step,
            tokens=tuple(proposal.tokens.tolist()),
            plan=plan,
            agreement=proposal.agreement,
            num_copied=proposal.num_copied,
            confidences=proposal.confidences,
        )
        return sent, proposal.draft_forwards, proposal.catchup


class ProposerStats:
    """Counts over the proposer's life (`proposer.stats`), in the glossary's words."""

    def __init__(self) -> None:
        self.requests = 0  # requests seen (one that comes back after long is seen again)
        self.rows = 0  # rows drafted for (one per request and step)
        self.proposed = 0  # tokens proposed
        self.drafted = 0  # proposed tokens whose verdict came back
        self.accepted = 0  # of those, accepted
        self.copied = {"lookup": 0, "suffix": 0}  # tokens proposed as copies, per source
        self.stored = 0  # requests' texts added to the suffix cache

    def add_copy(self, source: str | None, count: int) -> None:
        if source is not None and count:
            self.copied[source] = self.copied.get(source, 0) + count

    def add_proposal(self, count: int) -> None:
        self.rows += 1
        self.proposed += count

    def add_verdict(self, drafted: int, accepted: int) -> None:
        self.drafted += drafted
        self.accepted += accepted

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


def _load_draft(settings: ProposerSettings) -> Any:
    from dynaspec.models.loading import DEFAULT_DTYPE, load_model

    if not settings.draft:
        raise ConfigError(
            "DraftModelProposer needs a draft model: set DYNASPEC_VLLM_DRAFT to a dynaspec "
            "preset (`dynaspec models`), a model folder or a hub id before starting vLLM"
        )
    model, _ = load_model(settings.draft, dtype=settings.draft_dtype or DEFAULT_DTYPE)
    return model


def _device(model: Any) -> torch.device:
    device = getattr(model, "device", None)  # a model's or an adapter's
    return device if isinstance(device, torch.device) else next(model.parameters()).device
