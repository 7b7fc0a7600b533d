"""The cpu target across x86-64 levels (HPVM_CPU_LEVEL), thread counts and non-temporal stores,
hunted: every piece of a kernel's code is for the level the kernel was compiled for."""
from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.backends import jit, registry
from differential.data import load

SOURCE = """
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f16, f32, i64

@hpvm.leaf
def narrow_f16_store(a: In[Ptr[f32]], a_bytes: i64, o: Out[Ptr[f16]], o_bytes: i64):
    i = hpvm.instance_id(0)
    o[i] = f16(a[i] * 3.0)

@hpvm.graph
def narrow_f16_root(a: In[Ptr[f32]], a_bytes: i64, o: Out[Ptr[f16]], o_bytes: i64, n: i64):
    hpvm.node(narrow_f16_store, grid=n, a=a, a_bytes=a_bytes, o=o, o_bytes=o_bytes)
"""


def _narrow(root, rng: np.random.Generator, n: int) -> None:  # noqa: ANN001
    a = rng.standard_normal(n).astype(np.float32) * 1000
    o = np.zeros(n, np.float16)
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(root, a, a.nbytes, o, o.nbytes, n))
    np.testing.assert_array_equal(o.view(np.uint16), (a * np.float32(3)).astype(np.float16)
                                  .view(np.uint16))


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64") or not
                    registry.available("cpu") or "x86-64-v3" not in jit.runnable_levels(),
                    reason="needs an x86-64 CPU with F16C")
def test_a_kernels_non_temporal_driver_is_for_the_kernels_level(monkeypatch,
                                                                 tmp_path: Path) -> None:
    """The driver with non-temporal stores is compiled when a launch first wants it, and it was
    compiled for the HPVM_CPU_LEVEL of that moment: a kernel compiled for x86-64 (f16 converted in
    software) whose first large launch came after the level was unset ran F16C code, and the
    memory cache, which keys kernels by their level, handed that code to later compiles at
    x86-64."""
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HPVM_NO_CACHE", raising=False)
    monkeypatch.setenv("HPVM_CPU_LEVEL", "x86-64")
    root = load(SOURCE).narrow_f16_root
    rng = np.random.default_rng()
    _narrow(root, rng, 17)  # compiled for x86-64
    monkeypatch.delenv("HPVM_CPU_LEVEL")
    monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", "on")
    _narrow(root, rng, 4099 + int(rng.integers(0, 64)))  # its non-temporal driver
    objects = sorted((tmp_path / "cache").rglob("*.cpu.o"))
    assert len(objects) == 2  # the plain and the non-temporal driver, both for x86-64
    for path in objects:
        assert "__truncsfhf2" in jit.undefined_symbols(path.read_bytes()), path.name
