"""The decoding core: the round and the loop, verification, sampling, stats, validation and
configuration, and the protocols that everything above it satisfies."""
