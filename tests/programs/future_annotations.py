"""Rule violations in a module whose annotations are strings (PEP 563)."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, f32, i32, i64


@hpvm.leaf
def unsized(a: InOut[Ptr[f32]],  # ERR:future-pointer-size
            k: i32):
    a[0] = 1.0


@hpvm.graph
def future_root(a: InOut[Ptr[f32]], a_bytes: i64, k: i32):
    hpvm.node(unsized, a=a, k=k)


@hpvm.leaf
def takes_f32(x: f32):
    pass


@hpvm.graph
def future_bind_types(n: i64):
    hpvm.node(takes_f32, x=n)  # ERR:future-bind-types


@hpvm.leaf
def unknown_annotation(a: InOut[Ptr[f32]], a_bytes: i64,
                       n: Missing):  # ERR:future-unknown-annotation  # noqa: F821
    pass


@hpvm.graph
def future_unknown(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    hpvm.node(unknown_annotation, a=a, a_bytes=a_bytes, n=n)
