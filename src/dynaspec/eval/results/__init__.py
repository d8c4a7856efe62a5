"""`dynaspec results`: the results page (docs/results.md) and the README's hardware table,
generated from the records committed under benchmarks/ (benchmarks/README.md)."""
