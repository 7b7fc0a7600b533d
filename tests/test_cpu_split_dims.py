"""The cpu target divides a launch over the leaf's split dimension: the outermost one with more
than one instance (kernel.py `_shape`, driver.py `_split_dim`), not simply the outermost.

Before, a leaf whose outermost extents were 1 (a 2-D grid (n, 1), a 3-D grid (nx, ny, 1)) under
few parents ran as one partition, on one thread, whatever the machine had. Each case runs in a
subprocess with HPVM_NUM_THREADS=4 (the pool is made once per process): the partitions the
launch gets, every result against NumPy, and the first failure in instance order against the
python target's report.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TARGETS

pytestmark = pytest.mark.skipif("cpu" not in TARGETS, reason="the cpu target cannot run here")

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import json, sys
import numpy as np
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64
from hpvm_py.errors import ExecutionError

@hpvm.leaf
def scale2(a: In[Ptr[f32]], a_bytes: i64, o: InOut[Ptr[f32]], o_bytes: i64, nx: i64):
    x = hpvm.instance_id(0)
    y = hpvm.instance_id(1)
    at = y * nx + x
    o[at] = a[at] * 2.0 + f32(x) - f32(y)

@hpvm.graph
def root2(a: In[Ptr[f32]], a_bytes: i64, o: InOut[Ptr[f32]], o_bytes: i64, nx: i64, ny: i64):
    hpvm.node(scale2, grid=(nx, ny), a=a, a_bytes=a_bytes, o=o, o_bytes=o_bytes, nx=nx)

@hpvm.leaf
def scale3(a: In[Ptr[f32]], a_bytes: i64, o: InOut[Ptr[f32]], o_bytes: i64, nx: i64, ny: i64):
    x = hpvm.instance_id(0)
    y = hpvm.instance_id(1)
    z = hpvm.instance_id(2)
    at = (z * ny + y) * nx + x
    o[at] = a[at] * 2.0 + f32(x) - f32(y) + f32(z) * 0.5

@hpvm.graph
def root3(a: In[Ptr[f32]], a_bytes: i64, o: InOut[Ptr[f32]], o_bytes: i64, nx: i64, ny: i64,
          nz: i64):
    hpvm.node(scale3, grid=(nx, ny, nz), a=a, a_bytes=a_bytes, o=o, o_bytes=o_bytes, nx=nx, ny=ny)

@hpvm.leaf
def gather2(a: In[Ptr[f32]], a_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64, o: InOut[Ptr[f32]],
            o_bytes: i64, nx: i64):
    at = hpvm.instance_id(1) * nx + hpvm.instance_id(0)
    o[at] = a[idx[at]]

@hpvm.graph
def gather_root(a: In[Ptr[f32]], a_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64,
                o: InOut[Ptr[f32]], o_bytes: i64, nx: i64, ny: i64):
    hpvm.node(gather2, grid=(nx, ny), a=a, a_bytes=a_bytes, idx=idx, idx_bytes=idx_bytes, o=o,
              o_bytes=o_bytes, nx=nx)

def partitions(root, extents):
    (_, _, kernel), = hpvm.compile(root, target="cpu").leaf_kernels()
    return len(kernel._shape([extents])[3])

def expected(a, dims):
    ids = np.indices(dims[::-1]).astype(np.float32)  # z, y, x order
    out = a.reshape(dims[::-1]) * np.float32(2.0) + ids[-1] - ids[-2]
    if len(dims) == 3:
        out = out + ids[0] * np.float32(0.5)
    return out.ravel()

case = json.loads(sys.argv[1])
rng = np.random.default_rng(case["seed"])
report = {}
if case["kind"] == "grid":
    dims = tuple(case["dims"])
    n = int(np.prod(dims))
    a = rng.standard_normal(n).astype(np.float32)
    o = np.zeros(n, np.float32)
    root = root2 if len(dims) == 2 else root3
    with hpvm.runtime("cpu"):  # the roots take nx, ny(, nz) after the buffers
        hpvm.wait(hpvm.launch(root, a, a.nbytes, o, o.nbytes, *dims))
    report["parts"] = partitions(root, dims)
    report["equal"] = bool(np.array_equal(o, expected(a, dims)))
else:  # two out-of-bounds gathers in different partitions: the first in instance order wins
    nx, ny = case["dims"]
    n = nx * ny
    a = rng.standard_normal(64).astype(np.float32)
    idx = rng.integers(0, 64, n).astype(np.int64)
    first, second = case["bad"]
    idx[first], idx[second:] = 1000 + first, 5000
    messages = []
    for target in ("cpu", "python"):
        o = np.zeros(n, np.float32)
        try:
            with hpvm.runtime(target):
                hpvm.wait(hpvm.launch(gather_root, a, a.nbytes, idx, idx.nbytes, o, o.nbytes, nx, ny))
            messages.append("no error")
        except ExecutionError as error:
            messages.append(str(error))
    report["parts"] = partitions(gather_root, (nx, ny))
    report["messages"] = messages
print(json.dumps(report))
'''


def _run(case: dict, folder: Path) -> dict:
    script = folder / "split_case.py"  # leaves are compiled from their file's source
    script.write_text(SCRIPT)
    env = dict(os.environ, HPVM_NUM_THREADS="4", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(script), json.dumps(case)], env=env,
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dims, split", [
    ((200_003, 1), True), ((1, 200_003), True), ((70_001, 3), True), ((3, 70_001), True),
    ((300, 700, 1), True), ((100_003, 1, 1), True), ((1, 1, 100_003), True), ((1, 700, 300), True),
    ((5, 4, 3), False)])
def test_the_split_dimension_is_the_outermost_with_several_instances(dims, split, rng,
                                                                     tmp_path) -> None:
    report = _run({"kind": "grid", "dims": list(dims), "seed": int(rng.integers(1 << 31))},
                  tmp_path)
    assert report["equal"]
    assert (report["parts"] > 1) == split, report


@pytest.mark.parametrize("dims", [(400_000, 1), (4_000, 100)])
def test_the_first_failure_in_instance_order_is_reported_when_x_is_split(dims, rng,
                                                                         tmp_path) -> None:
    """Every instance from `second` on fails at once in later partitions; `first`, an early
    instance of the first partition, is the one python (instance by instance) reports."""
    n = dims[0] * dims[1]
    first = int(rng.integers(0, n // 64))
    second = int(rng.integers(n // 2, n - 1))
    report = _run({"kind": "fail", "dims": list(dims), "bad": [first, second],
                   "seed": int(rng.integers(1 << 31))}, tmp_path)
    assert report["parts"] > 1
    cpu, python = report["messages"]
    assert f"a[{1000 + first}]" in python, python
    assert cpu == python
