"""The decoding core, in the order of a round: the round's values (round.py), the loop
(loop.py; batch_loop.py for many rows), verification (verify.py), processed scores and
sampling (scores.py, sampling.py), the stopping criteria per token (emission.py), the finite
check (finite.py), stats, timing, configuration, and the protocols everything above satisfies.
transformers' generation keywords live a layer up, in dynaspec.compat."""
