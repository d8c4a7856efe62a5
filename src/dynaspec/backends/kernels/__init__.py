"""dynaspec's compiled CPU kernels (csrc/), built once at first use."""
