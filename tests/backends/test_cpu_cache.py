"""cpu backend: the memory and disk caches of compiled kernels, and the LLVM IR it emits."""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64
from hpvm_py.backends.base import NodeContext
from hpvm_py.backends.cpu import CpuBackend
from hpvm_py.support import stats

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
import numpy as np
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64
from hpvm_py.backends.base import BufferArg, NodeContext
from hpvm_py.backends.cpu import CpuBackend
from hpvm_py.support import stats

@hpvm.leaf
def scale(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, k: f32):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    b[i] = a[i] * k

a = np.arange(100, dtype=np.float32)
b = np.zeros_like(a)
ctx = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform", "buffer", "uniform", "uniform"),
                  output_modes=())
kernel = CpuBackend().compile_leaf(scale.ir, ctx)
buf = lambda x: BufferArg(obj=x, address=x.ctypes.data, nbytes=x.nbytes, array=x)
kernel.launch([buf(a), np.int64(a.nbytes), buf(b), np.int64(b.nbytes), np.float32(3)], [], [(100,)])
assert np.array_equal(b, a * 3)
print(json.dumps(stats.snapshot()))
"""


def _run_script(tmp_path: Path, env_extra: dict[str, str]) -> dict[str, int]:
    script = tmp_path / "cache_script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ)
    env.pop("HPVM_NO_CACHE", None)
    env.update(env_extra)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing(tmp_path):
    env = {"HPVM_CACHE_DIR": str(tmp_path / "cache")}
    first = _run_script(tmp_path, env)
    assert first.get("cpu_compiles") == 1
    second = _run_script(tmp_path, env)
    assert second.get("cpu_compiles", 0) == 0
    assert second.get("cache_disk_hits", 0) >= 1
    assert list((tmp_path / "cache").rglob("*.cpu.o"))


def test_no_cache_bypasses_the_disk(tmp_path):
    env = {"HPVM_CACHE_DIR": str(tmp_path / "cache")}
    _run_script(tmp_path, env)
    again = _run_script(tmp_path, {**env, "HPVM_NO_CACHE": "1"})
    assert again.get("cpu_compiles") == 1
    assert again.get("cache_disk_hits", 0) == 0


@hpvm.leaf
def dot_rows(A: In[Ptr[f32]], A_bytes: i64, x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]],
             y_bytes: i64, n: i64):
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    acc = f32(0.0)
    for k in range(n):
        acc += A[row * n + k] * x[k]
    y[row] = acc


CTX = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform") * 3 + ("uniform",),
                  output_modes=())


def test_memory_cache_hits(monkeypatch):
    monkeypatch.setenv("HPVM_NO_CACHE", "1")
    backend = CpuBackend()
    first = backend.compile_leaf(dot_rows.ir, CTX)
    before = stats.snapshot()
    assert backend.compile_leaf(dot_rows.ir, CTX) is first
    after = stats.snapshot()
    assert after.get("cpu_cache_memory_hits", 0) == before.get("cpu_cache_memory_hits", 0) + 1
    assert after.get("cpu_compiles", 0) == before.get("cpu_compiles", 0)
    assert backend.compile_leaf(dot_rows.ir, CTX, checked=True) is not first


def test_llvm_ir_is_readable_and_has_no_fast_math():
    text = CpuBackend().llvm_ir(dot_rows.ir, CTX)
    assert re.search(r"define void @\"?dot_rows\"?\(", text)
    assert "%acc" in text and "%row" in text or "%k" in text
    for flag in (" fast ", " contract ", " reassoc ", " afn ", " nnan ", " ninf "):
        assert flag not in text
    a = np.random.default_rng(0).random((7, 5), dtype=np.float32)
    x = np.random.default_rng(1).random(5, dtype=np.float32)
    y = np.zeros(7, np.float32)
    from cpu_harness import run

    run(dot_rows, [(7,)], a, None, x, None, y, None, 5)
    want = np.zeros(7, np.float32)
    for k in range(5):  # the same order of additions: bitwise equal
        want += a[:, k] * x[k]
    assert np.array_equal(y, want)
