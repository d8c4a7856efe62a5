"""`dynaspec oracle`: oracle lookahead runs, policy replays, cost model, report."""
