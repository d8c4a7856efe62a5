"""The suffix cache in the server: whose text a request may draft from (its scope), and what
each draft source did for a request (its `dynaspec` stats, the per-source metrics).

A draft only proposes and the target verifies, so every output stays the target's own. But
how fast a reply comes tells its reader how much of it was drafted, so a request that drafts
from another's text learns something of what the other wrote (a timing side channel, as
shared prefix caches have). The scope therefore follows the API key a request presents
(`key`, the default): with the server's one `--api-key`, everyone holding that key shares
the index, as they share the server; `user` narrows it to the request's OpenAI `user` field
within the key (an application that serves several people keeps them apart); `shared` is
one index for all requests (a single-user server drafts from everything it has seen).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from dynaspec.core.round import CopySource, Round


def scope_of(mode: str, authorization: str | None, user: str | None) -> str:
    """The suffix cache scope of a request: by the API key it presents (hashed: the cache
    never holds a key), and its `user` field too under "user"; one scope under "shared"."""
    if mode == "shared":
        return "shared"
    scope = "key:" + _digest(authorization or "")
    if mode == "user":
        scope += ":user:" + _digest(user or "")
    return scope


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def source_counts(rounds: Iterable[Round]) -> dict[str, dict[str, Any]]:
    """Per draft source ("lookup", "suffix", "model"): the rounds it drafted in, the tokens
    it proposed and of those the target accepted, and their ratio (None: none proposed).
    A round's copied tokens are its plan's source's, the draft model's come after them."""
    counts = {name: {"rounds": 0, "drafted": 0, "accepted": 0} for name in SOURCE_NAMES}
    for record in rounds:
        copied = record.num_copied
        parts = ((str(record.plan.source), copied, min(record.num_accepted, copied)),
                 ("model", record.num_model, max(record.num_accepted - copied, 0)))  # fmt: skip
        for name, drafted, accepted in parts:
            if drafted:
                entry = counts[name]
                entry["rounds"] += 1
                entry["drafted"] += drafted
                entry["accepted"] += accepted
    for entry in counts.values():
        entry["acceptance_rate"] = (
            entry["accepted"] / entry["drafted"] if entry["drafted"] else None
        )
    return counts


SOURCE_NAMES = (CopySource.LOOKUP.value, CopySource.SUFFIX.value, "model")
