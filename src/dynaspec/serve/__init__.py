"""`dynaspec serve`: an OpenAI-compatible HTTP server that decodes speculatively and batches
concurrent requests round by round (docs/serve.md).

    config.py    the server's settings          protocol.py  OpenAI's shapes and errors
    prompts.py   chat template / tokenizer       text.py      deltas and stop sequences
    engine.py    the engine thread and queue     metrics.py   Prometheus metrics
    app.py       the FastAPI routes              limits.py    the body size limit
    run.py       load the models, run uvicorn

Needs the `serve` extra: pip install -e ".[serve]".
"""
