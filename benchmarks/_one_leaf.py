"""The one-leaf graph the launch benchmarks time: y[0] += k on one instance, so that a launch's time
is the runtime's. (benchmarks/launch_ab.py also writes this file's text out for another copy of
the package, its import renamed.)"""
import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, f32, i64


@hpvm.leaf
def bump(x: InOut[Ptr[f32]], x_bytes: i64, k: f32):
    x[0] = x[0] + k


@hpvm.graph
def one_leaf(x: InOut[Ptr[f32]], x_bytes: i64, k: f32):
    hpvm.node(bump, x=x, x_bytes=x_bytes, k=k)
