"""A graph whose leaf, graph and parameters have non-ASCII names (Python identifiers may be any
Unicode letters): every target must take them (tests/backends/test_triton.py compiles its Triton
kernel for sm_90, which refuses other identifiers as a kernel's name)."""
import hpvm_py as hpvm
from hpvm_py import Out, Ptr, i64


@hpvm.leaf
def añadir(xλ: i64, sal: Out[Ptr[i64]], sal_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    sal[i] = xλ + i


@hpvm.graph
def raíz(xλ: i64, sal: Out[Ptr[i64]], sal_bytes: i64, n: i64):
    hpvm.node(añadir, grid=(n,), xλ=xλ, sal=sal, sal_bytes=sal_bytes)
