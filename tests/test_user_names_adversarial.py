"""Names: IR names stay unique, and messages show the name the user wrote.

Each check runs in a fresh interpreter: IR names are unique per process, so what other tests
compiled would change them."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, f32, i64

ROOT = Path(__file__).resolve().parents[1]

LEAF = """
@hpvm.leaf
def {name}(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = {k} * a[i]
"""
HEAD = "import hpvm_py as hpvm\nfrom hpvm_py import In, Out, Ptr, f32, i64\n"


def _run(tmp_path: Path, files: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)


def test_user_function_named_like_a_renamed_one_keeps_its_own_body(tmp_path: Path) -> None:
    # `leaf`, then a user's `leaf_2`, then a second `leaf`: the second `leaf` was named `leaf_2`
    # too, and the graph ran one leaf's body for both nodes
    a = np.random.default_rng().standard_normal(16).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    m1 = HEAD + LEAF.format(name="leaf", k="2.0") + LEAF.format(name="leaf_2", k="3.0")
    m2 = HEAD + "import m1\nimport numpy as np\n" + LEAF.format(name="leaf", k="5.0") + """
@hpvm.graph
def root(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, d: Out[Ptr[f32]],
         d_bytes: i64, n: i64):
    hpvm.node(m1.leaf_2, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)
    hpvm.node(leaf, grid=n, a=a, a_bytes=a_bytes, c=d, c_bytes=d_bytes)

hpvm.init()
a = np.load("a.npy")
for t in ("python", "cpu"):
    c = np.zeros_like(a)
    d = np.zeros_like(a)
    hpvm.launch(hpvm.compile(root, target=t), a, a.nbytes, c, c.nbytes, d, d.nbytes, a.size)
    np.save(f"c_{t}.npy", c)
    np.save(f"d_{t}.npy", d)
"""
    done = _run(tmp_path, {"m1.py": m1, "m2.py": m2}, "m2.py")
    assert done.returncode == 0, done.stderr
    for t in ("python", "cpu"):
        np.testing.assert_allclose(np.load(tmp_path / f"c_{t}.npy"), np.float32(3.0) * a)
        np.testing.assert_allclose(np.load(tmp_path / f"d_{t}.npy"), np.float32(5.0) * a)


BAD_LEAF = """
@hpvm.leaf
def leaf(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    a[i] = 2.0 * c[i]
"""
GRAPH = """
@hpvm.graph
def root(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(leaf, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)
"""


def test_check_names_the_leaf_the_user_wrote(tmp_path: Path) -> None:
    # m1's `leaf` takes the IR name `leaf`, so m2's is `leaf_2`: the message gave that name
    m1 = HEAD + LEAF.format(name="leaf", k="2.0")
    m2 = HEAD + "import m1\n" + BAD_LEAF + GRAPH
    done = _run(tmp_path, {"m1.py": m1, "m2.py": m2}, "-m", "hpvm_py.cli", "check", "m2.py")
    assert done.returncode != 0
    assert "error: leaf writes through 'a', declared In[...]" in done.stderr + done.stdout
    assert "leaf_2" not in done.stderr + done.stdout


def test_launch_errors_and_node_names_give_the_users_names(tmp_path: Path) -> None:
    m1 = HEAD + LEAF.format(name="leaf", k="2.0") + GRAPH
    m2 = HEAD + "import m1\nimport numpy as np\n" + LEAF.format(name="leaf", k="3.0") + GRAPH + """
print("nodes", [n.name for n in root.ir.nodes])
hpvm.init()
a = np.zeros(4, np.float32)
try:
    hpvm.launch(hpvm.compile(root, target="python"), a, a)
except hpvm.errors.LaunchError as e:
    print(e)
"""
    done = _run(tmp_path, {"m1.py": m1, "m2.py": m2}, "m2.py")
    assert done.returncode == 0, done.stderr
    assert "nodes ['leaf']" in done.stdout  # a node is named after its function when not named
    assert "graph root takes" in done.stdout
    assert "root_2" not in done.stdout and "leaf_2" not in done.stdout


def test_kernel_errors_name_the_leaf_the_user_wrote(tmp_path: Path) -> None:
    # an out-of-bounds read, found by the python kernel and by the compiled cpu kernel
    m1 = HEAD + LEAF.format(name="leaf", k="2.0")
    m2 = HEAD + "import m1\nimport numpy as np\n" + LEAF.format(name="leaf", k="3.0") + GRAPH + """
hpvm.init()
a = np.zeros(4, np.float32)
c = np.zeros(8, np.float32)
for t in ("python", "cpu"):
    try:
        hpvm.launch(hpvm.compile(root, target=t), a, a.nbytes, c, c.nbytes, 8)
    except hpvm.errors.ExecutionError as e:
        print(t, str(e).splitlines()[0])
"""
    done = _run(tmp_path, {"m1.py": m1, "m2.py": m2}, "m2.py")
    assert done.returncode == 0, done.stderr
    for t in ("python", "cpu"):
        assert f"{t} " in done.stdout and "error: leaf: out-of-bounds" in done.stdout, done.stdout
    assert "leaf_2" not in done.stdout


def test_profile_events_name_the_users_functions(tmp_path: Path) -> None:
    m1 = HEAD + LEAF.format(name="leaf", k="2.0") + GRAPH
    m2 = HEAD + "import m1\nimport json\nimport numpy as np\n" + LEAF.format(name="leaf", k="3.0")
    m2 += GRAPH + """
a = np.ones(4, np.float32)
c = np.zeros(4, np.float32)
with hpvm.profile("trace.json"):
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(root, a, a.nbytes, c, c.nbytes, 4))
events = json.load(open("trace.json"))["traceEvents"]
print(sorted({(e.get("cat"), e.get("name"), (e.get("args") or {}).get("graph")) for e in events
              if e.get("cat") in ("launch", "node", "kernel", "compile")}, key=str))
"""
    done = _run(tmp_path, {"m1.py": m1, "m2.py": m2}, "m2.py")
    assert done.returncode == 0, done.stderr
    assert "('kernel', 'leaf', None)" in done.stdout and "('launch', 'root', None)" in done.stdout
    assert "('node', 'leaf', 'root')" in done.stdout and "'cpu leaf'" in done.stdout
    assert "leaf_2" not in done.stdout and "root_2" not in done.stdout, done.stdout


HELPER = """
@hpvm.func
def h(x: f32) -> None:
    y = x
"""


def test_node_and_helper_errors_name_the_users_functions(tmp_path: Path) -> None:
    m1 = HEAD + HELPER + LEAF.format(name="leaf", k="2.0")
    m2 = HEAD + "import m1\n" + HELPER + LEAF.format(name="leaf", k="3.0") + """
@hpvm.leaf
def uses(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    y = h(a[0])

@hpvm.graph
def bad_input(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(leaf, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, x=n)

@hpvm.graph
def void_helper(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    hpvm.node(uses, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)

for g in (bad_input, void_helper):
    try:
        g.ir
    except hpvm.errors.HPVMError as e:
        print(str(e).splitlines()[0])
"""
    done = _run(tmp_path, {"m1.py": m1, "m2.py": m2}, "m2.py")
    assert done.returncode == 0, done.stderr
    assert "error: leaf has no input named 'x'" in done.stdout, done.stdout
    assert "error: h() returns nothing" in done.stdout, done.stdout
    assert "leaf_2" not in done.stdout and "h_2" not in done.stdout


def test_a_collectives_node_is_named_after_it() -> None:
    @hpvm.graph
    def g(buf: InOut[Ptr[f32]], buf_bytes: i64):
        hpvm.node(hpvm.comm.all_reduce(f32, op="sum"), buf=buf, buf_bytes=buf_bytes)

    (node,) = g.ir.nodes
    assert node.name.startswith("all_reduce_f32_sum") and node.name.isidentifier()
