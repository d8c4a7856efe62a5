"""`dynaspec devicecheck`: the cuda tests, and costs of real-shape pairs on a GPU in one short
run (see `dynaspec.eval.devicecheck.run`)."""
