"""dynaspec inside vLLM: proposers for `speculative_config={"method": "custom_class", ...}`.

    LLM(model, speculative_config={
        "method": "custom_class",
        "model": "dynaspec.integrations.vllm.LookupProposer",   # or DraftModelProposer
        "num_speculative_tokens": 10,
    })

vLLM itself is not imported here: the proposers read its config by attribute and take
plain lists and numpy arrays, so they are tested without vLLM (tests/test_vllm_plugin.py).
docs/vllm.md says what runs where, the suffix cache (DYNASPEC_VLLM_SUFFIX_CACHE) and why
keyed seeds are refused inside vLLM.
"""

from dynaspec.integrations.vllm.proposers import (
    DraftModelProposer,
    DynaspecProposer,
    LookupProposer,
    ProposerStats,
)
from dynaspec.integrations.vllm.requests import RequestTracker
from dynaspec.integrations.vllm.settings import ProposerSettings

__all__ = [
    "DraftModelProposer",
    "DynaspecProposer",
    "LookupProposer",
    "ProposerSettings",
    "ProposerStats",
    "RequestTracker",
]
