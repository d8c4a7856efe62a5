"""Instruments that measure the library: prompt data, provenance, the cost model, the
transformers peer, the benchmark and the oracle analysis."""
