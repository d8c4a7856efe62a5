"""dynaspec's compiled CPU kernels: C++ sources (csrc/) built once at first use (build.py),
each behind the one face of base.py and listed in registry.py, the one list that
`dynaspec models`, the quantizer (backends/quant.py) and the CLI read."""
