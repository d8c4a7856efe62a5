"""Instruments that measure the library: prompt data, provenance, the cost model, the
transformers peer, the benchmark, the oracle analysis and the load tester (loadtest.py over
load.py). They stand beside the product: nothing outside eval/ imports them but the CLI,
inside the command that needs them (tests/test_layers.py)."""
