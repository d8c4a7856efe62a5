"""`dynaspec serve` with the official openai client, against a server on 127.0.0.1 with the
tiny pair (float32): every request's greedy text equals generate() of its prompt alone (and
the target alone's), streamed or not, under concurrency; stop sequences, seeds, usage,
the extra stats field; and every error in OpenAI's shape."""

from __future__ import annotations

import concurrent.futures
import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("openai")

from serve_helpers import alone_text, call, client, running_server, serve_fixtures  # noqa: E402

from dynaspec.core.config import SpecConfig  # noqa: E402

PROMPTS = ["def fib(n):", "class Stack:\n    def push(self, x):", "x = [1, 2", "import os"]
NEW = 24


models, server = serve_fixtures(max_batch=3, max_queue=16)


def chat(url: str, prompt: str, **kwargs):
    messages = [{"role": "user", "content": prompt}]
    return client(url).chat.completions.create(model="tiny", messages=messages, **kwargs)


def streamed(url: str, prompt: str, **kwargs) -> tuple[str, list]:
    chunks = list(chat(url, prompt, stream=True, **kwargs))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def test_chat_and_completion_equal_generate_alone(server, models) -> None:
    url, _ = server
    target, draft, tokenizer = models
    for prompt in PROMPTS:
        expected = alone_text(target, draft, tokenizer, prompt, NEW)
        assert expected == alone_text(target, None, tokenizer, prompt, NEW)  # the target's own
        reply = chat(url, prompt, max_tokens=NEW)
        assert reply.choices[0].message.content == expected
        assert reply.choices[0].finish_reason in ("length", "stop")
        completion = client(url).completions.create(model="tiny", prompt=prompt, max_tokens=NEW)
        assert completion.choices[0].text == expected
        assert reply.usage.prompt_tokens == len(tokenizer(prompt)["input_ids"])
        assert reply.usage.completion_tokens == NEW  # the tiny pair never says EOS this early
        stats = reply.model_extra["dynaspec"]
        assert stats["rounds"] >= 1 and stats["drafted_tokens"] >= stats["accepted_tokens"]


def test_streaming_gives_the_same_text_and_usage(server, models) -> None:
    url, _ = server
    target, draft, tokenizer = models
    prompt = PROMPTS[1]
    text, chunks = streamed(url, prompt, max_tokens=NEW, stream_options={"include_usage": True})
    assert text == alone_text(target, draft, tokenizer, prompt, NEW)
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    assert "dynaspec" in finals[0].model_extra
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == NEW
    pieces = client(url).completions.create(
        model="tiny", prompt=prompt, max_tokens=NEW, stream=True
    )
    assert "".join(c.choices[0].text for c in pieces) == text


def test_concurrent_requests_each_get_their_own_output(server, models) -> None:
    """More requests than --max-batch at once, with different lengths: every text equals
    its prompt's alone, whoever shared its batch."""
    url, _ = server
    target, draft, tokenizer = models
    jobs = [(prompt, new, stream) for prompt in PROMPTS for new in (8, 30) for stream in (0, 1)]

    def one(job):
        prompt, new, stream = job
        if stream:
            return streamed(url, prompt, max_tokens=new)[0]
        return chat(url, prompt, max_tokens=new).choices[0].message.content

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(one, jobs))
    for (prompt, new, _), text in zip(jobs, texts, strict=True):
        assert text == alone_text(target, draft, tokenizer, prompt, new), (prompt, new)


def test_long_prompts_joining_in_chunks_get_their_own_output(models) -> None:
    """With a prefill chunk of 4 tokens, long prompts join over several rounds while the
    others generate: every text still equals its prompt's alone."""
    target, draft, tokenizer = models
    prompts = [p * 6 for p in PROMPTS]  # 54 to 204 byte tokens
    settings = {"max_batch": 2, "prefill_chunk": 4}
    with (
        running_server(target, draft, tokenizer, **settings) as (url, _),
        concurrent.futures.ThreadPoolExecutor(4) as pool,
    ):
        texts = list(pool.map(lambda p: chat(url, p, max_tokens=12), prompts))
    for prompt, text in zip(prompts, texts, strict=True):
        want = alone_text(target, draft, tokenizer, prompt, 12)
        assert text.choices[0].message.content == want, prompt


def test_stop_sequences_end_the_text_before_them(server, models) -> None:
    url, _ = server
    target, draft, tokenizer = models
    full = alone_text(target, draft, tokenizer, PROMPTS[0], NEW)
    stop = full[5:7]
    reply = chat(url, PROMPTS[0], max_tokens=NEW, stop=[stop, "never seen"])
    assert reply.choices[0].message.content == full[: full.index(stop)]
    assert reply.choices[0].finish_reason == "stop"
    text, _ = streamed(url, PROMPTS[0], max_tokens=NEW, stop=stop)
    assert text == full[: full.index(stop)]


def test_seeded_sampling_repeats_and_follows_generate(models) -> None:
    """With a fixed schedule (the adaptive rule's rounds follow measured times), a seed
    gives the same text every time, the text generate(seed=...) gives."""
    target, draft, tokenizer = models
    spec = SpecConfig(num_assistant_tokens_schedule="constant", num_assistant_tokens=4)
    with running_server(target, draft, tokenizer, spec=spec) as (url, _):
        settings = {"max_tokens": NEW, "temperature": 0.8, "top_p": 0.9, "seed": 11}
        first = chat(url, PROMPTS[2], **settings).choices[0].message.content
        again = chat(url, PROMPTS[2], **settings).choices[0].message.content
        other = chat(url, PROMPTS[2], **{**settings, "seed": 12}).choices[0].message.content
    expected = alone_text(
        target,
        draft,
        tokenizer,
        PROMPTS[2],
        NEW,
        do_sample=True,
        temperature=0.8,
        top_p=0.9,
        seed=11,
        num_assistant_tokens_schedule="constant",
        num_assistant_tokens=4,
    )
    assert first == again == expected
    assert other != first


def test_models_health_and_metrics(server) -> None:
    url, _ = server
    assert [m.id for m in client(url).models.list()] == ["tiny"]
    status, _, body = call(url, "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    chat(url, PROMPTS[0], max_tokens=4)
    assert (
        call(
            url,
            "/v1/chat/completions",
            {"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]},
        )[0]
        == 404
    )
    status, headers, body = call(url, "/metrics")
    text = body.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    for series in (
        'dynaspec_requests_total{endpoint="chat",status="200"}',
        'dynaspec_requests_total{endpoint="chat",status="404"}',
        "dynaspec_time_to_first_token_seconds_bucket",
        "dynaspec_drafted_tokens_total",
        "dynaspec_accepted_tokens_total",
        "dynaspec_copied_tokens_total",
        "dynaspec_acceptance_rate",
        "dynaspec_batch_size",
        "dynaspec_queue_length",
        "dynaspec_request_tokens_per_second_bucket",
    ):
        assert series in text, series


def test_the_fast_path_serves_in_batches_with_each_prompts_output(models) -> None:
    """`dynaspec serve --static`: static target and draft under concurrency (rows join in
    chunks and leave): every text equals its prompt's alone with the transformers models."""
    from dynaspec.backends import make_fast

    target, draft, tokenizer = models
    fast_target, fast_draft = make_fast(target, static=True), make_fast(draft, static=True)
    jobs = [(prompt * 3, new) for prompt in PROMPTS for new in (8, 20)]
    settings = {"max_batch": 3, "prefill_chunk": 8}
    with (
        running_server(fast_target, fast_draft, tokenizer, prompt_lookup=8, **settings) as (
            url,
            _,
        ),
        concurrent.futures.ThreadPoolExecutor(6) as pool,
    ):
        texts = list(pool.map(lambda job: chat(url, job[0], max_tokens=job[1]), jobs))
    for (prompt, new), text in zip(jobs, texts, strict=True):
        want = alone_text(target, draft, tokenizer, prompt, new)
        assert text.choices[0].message.content == want, (prompt, new)


def test_token_ids_come_back_when_asked_for(server, models) -> None:
    """`return_token_ids` (vLLM's field): the prompt's and the completion's ids, whole or in
    the closing chunk of a stream; the completion's decode to the text."""
    url, _ = server
    _, _, tokenizer = models
    asked = {"extra_body": {"return_token_ids": True}}
    whole = chat(url, PROMPTS[0], max_tokens=NEW, **asked)
    ids = whole.choices[0].model_extra["token_ids"]
    assert len(ids) == whole.usage.completion_tokens
    assert tokenizer.decode(ids, skip_special_tokens=True) == whole.choices[0].message.content
    assert len(whole.model_extra["prompt_token_ids"]) == whole.usage.prompt_tokens
    text, chunks = streamed(url, PROMPTS[0], max_tokens=NEW, **asked)
    closing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert closing[0].choices[0].model_extra["token_ids"] == ids and text == tokenizer.decode(
        ids, skip_special_tokens=True
    )
    plain = chat(url, PROMPTS[0], max_tokens=NEW)
    assert "token_ids" not in (plain.choices[0].model_extra or {})
