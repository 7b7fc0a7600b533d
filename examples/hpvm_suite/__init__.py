"""HPVM's own benchmark suite (`hpvm/test/benchmarks/` of the HPVM repository), ported to hpvm-py.

One module per benchmark: `sgemm`, `stencil`, `spmv`, `lbm` (Parboil), `cava` (the Harvard camera
pipeline) and `pipeline` (edge detection over a stream of frames). Each module's docstring gives
the graph, the inputs and what differs from the HPVM-C original; `benchmarks/hpvm_suite.py` runs
them, checks them against NumPy and times them against torch.compile and Numba (docs/suite.md).
"""
BENCHMARKS = ("sgemm", "stencil", "spmv", "lbm", "cava", "pipeline")
