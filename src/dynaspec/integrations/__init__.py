"""dynaspec inside other engines: proposers that vLLM calls (vllm/, docs/vllm.md)."""
