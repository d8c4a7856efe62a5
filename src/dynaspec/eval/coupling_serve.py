"""Keyed seeds through `dynaspec serve` under load: concurrent clients send seeded requests
and every text must be the target alone's with its seed (the coupling instrument's
`--server-clients N`, eval/coupling.py).

The server runs in this process on loopback, with the pair as loaded, the adaptive schedule
and prompt lookup (as `dynaspec serve` runs them) and its suffix cache on, so a request's
drafts depend on what else the batch holds and on what earlier requests wrote (a draft with
another tokenizer drafts over the tokens both share, without the suffix cache). Each request
sends its prompt as token ids (no chat template between the instrument and the server) and
asks for the ids back (`return_token_ids`), which are compared with the target alone's.
"""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

MODEL_NAME = "coupling"


@dataclass
class ServeCheck:
    """What the server's seeded requests gave."""

    clients: int
    requests: int = 0
    failed: int = 0
    new_tokens: int = 0
    seconds: float = 0.0  # wall time of all the requests
    differences: list[dict[str, Any]] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        rate = self.new_tokens / self.seconds if self.seconds > 0 else 0.0
        return {**asdict(self), "differing": len(self.differences), "tokens_per_s": rate}


def serve_check(
    pair: Any,
    prompts: list[torch.Tensor],
    seeds: int,
    sampling: dict[str, Any],
    expected: dict[tuple[int, int], list[int]],
    clients: int,
    prompt_lookup: int | None,
) -> ServeCheck:
    """Every (prompt, seed) sent once, by `clients` concurrent clients, keyed (the default);
    each text's ids compared with `expected[prompt, seed]` (the target alone's new tokens)."""
    from dynaspec.serve.config import ServeConfig
    from dynaspec.serve.run import build_app, in_thread

    config = ServeConfig(model_name=MODEL_NAME, port=0, max_batch=clients, max_queue=64)
    # a draft with a tokenizer of its own drafts over the tokens both share (the one way
    # such a draft samples), as `dynaspec serve --cross-tokenizer-method intersection`
    own = {"draft_tokenizer": getattr(pair, "draft_tokenizer", None)}
    own["cross_tokenizer"] = "intersection"
    app = build_app(pair.target, pair.draft, pair.tokenizer, config, None, prompt_lookup, **own)
    jobs = [(index, seed) for seed in range(seeds) for index in range(len(prompts))]
    check = ServeCheck(clients)
    with in_thread(app) as url:

        def send(job: tuple[int, int]) -> tuple[tuple[int, int], list[int] | None]:
            index, seed = job
            body = _body(prompts[index], seed, sampling)
            return job, _post(url + "/v1/completions", body)

        start = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            answers = list(pool.map(send, jobs))
        check.seconds = time.perf_counter() - start
    for (index, seed), ids in answers:
        check.requests += 1
        if ids is None:
            check.failed += 1
            continue
        check.new_tokens += len(ids)
        if ids != expected[index, seed]:
            where = {"prompt": index, "seed": seed, "setting": f"serve/{clients} clients"}
            check.differences.append(where)
    return check


def _body(ids: torch.Tensor, seed: int, sampling: dict[str, Any]) -> dict[str, Any]:
    """The completion request of a prompt (its ids) with `sampling`'s settings and the seed."""
    body = {
        "model": MODEL_NAME,
        "prompt": ids[0].tolist(),
        "max_tokens": sampling["max_new_tokens"],
        "temperature": sampling["temperature"],
        "seed": seed,
        "return_token_ids": True,
    }
    if sampling.get("top_p") is not None:
        body["top_p"] = sampling["top_p"]
    return body


def _post(url: str, body: dict[str, Any]) -> list[int] | None:
    """The completion's token ids, or None when the server refused the request."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=3600) as response:
            answer = json.loads(response.read())
    except OSError:  # urllib's HTTPError and URLError are OSErrors
        return None
    return list(answer["choices"][0]["token_ids"])
