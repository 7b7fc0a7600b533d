"""Profiling: `with hpvm.profile(path)`, `hpvmc run --trace`, `hpvmc viz --profile` and
stats()["times"] (docs/profiling.md).

Every trace written here is checked as Chrome's trace-event format requires (what
ui.perfetto.dev and chrome://tracing read): every event has name, ph, ts, pid and tid, complete
("X") events have a duration >= 0, the events of one track nest, every track is named by a
metadata ("M") event.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64
from hpvm_py.backends import registry
from hpvm_py.cli import main as hpvmc
from hpvm_py.ir.kernel import shown_name
from hpvm_py.support import profile as P
from tests.programs import stream_graphs as S

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import edge_detection  # noqa: E402
import vadd  # noqa: E402

MPIEXEC = Path(sys.executable).parent / "mpiexec"
EPS = 0.002  # microseconds: timestamps are written with three decimals


@hpvm.leaf
def profiled_twice(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    i = hpvm.instance_id(0)
    b[i] = a[i] * 2.0


@hpvm.graph
def profiled_doubled(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, n: i64):
    hpvm.node(profiled_twice, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes)


def checked(path: Path) -> dict:
    """The trace at path, after checking it is valid Chrome-trace JSON with nesting tracks."""
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert events
    named: set[tuple[int, int]] = set()
    for e in events:
        for key in ("name", "ph", "ts", "pid", "tid"):
            assert key in e, (key, e)
        assert isinstance(e["ts"], (int, float)) and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["ph"] in ("X", "M"), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name",
                                 "thread_sort_index") and "args" in e
            if e["name"] == "thread_name":
                named.add((e["pid"], e["tid"]))
        else:
            assert e["dur"] >= 0 and e["ts"] >= 0 and e["cat"] in P.CATEGORIES, e
    tracks: dict[tuple[int, int], list[dict]] = {}
    for e in events:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    assert set(tracks) <= named  # every track has a name
    for key, slices in tracks.items():  # one track's events nest (a stack)
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
        ends: list[float] = []
        for e in slices:
            while ends and ends[-1] <= e["ts"] + EPS:
                ends.pop()
            assert not ends or e["ts"] + e["dur"] <= ends[-1] + EPS, (key, e)
            ends.append(e["ts"] + e["dur"])
    return trace


def track_names(trace: dict) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
            if e["name"] == "thread_name"}


def of(trace: dict, cat: str) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("cat") == cat]


def outermost_seconds(trace: dict, cat: str) -> float:
    """The seconds of a category's events not nested in another of the category on their track
    (what stats()["times"] counts)."""
    total = 0.0
    by_track: dict[tuple[int, int], list[dict]] = {}
    for e in of(trace, cat):
        by_track.setdefault((e["pid"], e["tid"]), []).append(e)
    for slices in by_track.values():
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
        end = -1.0
        for e in slices:
            if e["ts"] + e["dur"] <= end + EPS:
                continue
            total += e["dur"] / 1e6
            end = e["ts"] + e["dur"]
    return total


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_trace_of_a_launch(target: str, tmp_path: Path) -> None:
    path = tmp_path / "launch.json"
    a = np.arange(64, dtype=np.float32)
    b = np.zeros_like(a)
    with hpvm.profile(path) as prof:
        assert P.on
        with hpvm.runtime(target):
            for _ in range(3):
                hpvm.wait(hpvm.launch(profiled_doubled, a, a.nbytes, b, b.nbytes, len(a)))
            times = hpvm.stats()["times"]
    assert not P.on and prof.trace is not None
    np.testing.assert_array_equal(b, a * 2)
    trace = checked(path)
    launches = of(trace, "launch")
    graph = hpvm.compile(profiled_doubled, target)  # (IR names are unique per process)
    (leaf,) = graph.plan.nodes
    shown = shown_name(graph.module.root_func)  # (the def's name: IR names get a suffix)
    assert [e["name"] for e in launches] == [shown] * 3
    assert all(e["args"]["target"] == target for e in launches)
    nodes = of(trace, "node")
    assert nodes and all(e["name"] == leaf.name and e["args"]["instances"] == 64 and
                         e["args"]["graph"] == shown for e in nodes)
    kernels = of(trace, "kernel")
    assert len(kernels) == 3 and {e["name"] for e in kernels} == {shown_name(leaf.func)}
    assert of(trace, "compile") and of(trace, "cache")  # the first launch compiles, the others hit
    if target == "cpu":
        assert any(e["args"].get("replayed") for e in launches)  # a repeat is replayed
    # stats()["times"]: positive where something ran, and the trace's own totals
    for cat in ("launch", "kernel", "compile"):
        assert times[cat] > 0
        assert times[cat] == pytest.approx(outermost_seconds(trace, cat), rel=1e-3, abs=1e-5)
    assert times["launch"] >= times["kernel"]
    assert set(times) == set(P.CATEGORIES)
    assert trace["otherData"]["hpvm_times"]["launch"] == pytest.approx(times["launch"], rel=1e-3, abs=1e-5)


def test_kernel_events_nest_inside_nodes_inside_launches(tmp_path: Path) -> None:
    path = tmp_path / "nested.json"
    a = np.ones(16, np.float32)
    b = np.zeros_like(a)
    with hpvm.profile(path), hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(profiled_doubled, a, a.nbytes, b, b.nbytes, len(a)))
    trace = checked(path)
    (launch,), (node,), (kernel,) = of(trace, "launch"), of(trace, "node"), of(trace, "kernel")
    assert launch["tid"] == node["tid"] == kernel["tid"]
    assert launch["ts"] <= node["ts"] <= kernel["ts"]
    assert kernel["ts"] + kernel["dur"] <= node["ts"] + node["dur"] + EPS
    assert node["ts"] + node["dur"] <= launch["ts"] + launch["dur"] + EPS


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_two_stage_stream_has_a_track_per_stage(target: str, tmp_path: Path) -> None:
    path = tmp_path / "stream.json"
    n, items = 32, 5
    xs = [np.full(n, i, np.float32) for i in range(items)]
    ys = [np.zeros(n, np.float32) for _ in range(items)]
    with hpvm.profile(path):
        with hpvm.runtime(target):
            handle = hpvm.launch(S.two_stages, stream=True)
            for x, y in zip(xs, ys):
                hpvm.push(handle, x, x.nbytes, y, y.nbytes, 2.0, n)
            results = [hpvm.pop(handle) for _ in range(items)]
            hpvm.wait(handle)
            times = hpvm.stats()["times"]
    assert [r[0] for r in results] == [pytest.approx(n * (2.0 * i + 1)) for i in range(items)]
    trace = checked(path)
    names = track_names(trace)
    stages = of(trace, "stage")
    per_track: dict[str, list[int]] = {}
    for e in stages:
        per_track.setdefault(names[(e["pid"], e["tid"])], []).append(e["args"]["item"])
    stage_names = {f"stage {node.name}" for node in hpvm.compile(S.two_stages, target).plan.nodes}
    assert per_track.keys() == stage_names and len(stage_names) == 2
    assert all(sorted(v) == list(range(items)) for v in per_track.values())
    assert times["stage"] > 0
    assert times["stage"] == pytest.approx(sum(e["dur"] for e in stages) / 1e6, rel=1e-3, abs=1e-5)


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_trace_of_the_demo(target: str, tmp_path: Path) -> None:
    """What `make demo` runs, small: examples' graphs once, then edge detection as a stream."""
    path = tmp_path / "demo.json"
    rng = np.random.default_rng(0)
    gauss = edge_detection.gaussian_filter()
    frames = [edge_detection.frame_buffers(edge_detection.synthetic_frame(rng, 12, 16)) for _ in range(3)]
    with hpvm.profile(path):
        vadd.main(target, 1000)
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(edge_detection.pipeline, *edge_detection.frame_args(frames[0], gauss, 0.25)))
            handle = hpvm.launch(edge_detection.pipeline, stream=True)
            for bufs in frames:
                hpvm.push(handle, *edge_detection.frame_args(bufs, gauss, 0.25))
            hpvm.wait(handle)
    for bufs in frames:
        np.testing.assert_allclose(bufs[5], edge_detection.reference(bufs[0], gauss, 0.25), atol=1e-6)
    trace = checked(path)
    names = set(track_names(trace).values())
    stages = {n.removeprefix("stage ") for n in names if n.startswith("stage ")}
    assert stages == {node.name for node in hpvm.compile(edge_detection.pipeline, target).plan.nodes}
    assert {e["name"] for e in of(trace, "launch")} >= {edge_detection.pipeline.user_name}  # (not pipeline_2)
    assert len(of(trace, "stage")) == len(stages) * len(frames)


GPU = registry.available("gpu") and not registry.available("nvptx")


@pytest.mark.skipif(not GPU, reason="fake devices stand in only where there is no CUDA GPU (CI)")
def test_copies_carry_bytes_direction_and_device(tmp_path: Path) -> None:
    """The gpu target on a fake device: the copies in and out, on a track per engine and direction."""
    path = tmp_path / "copies.json"
    a = np.arange(32, dtype=np.float32)
    b = np.zeros_like(a)
    with hpvm.profile(path):
        with hpvm.runtime("gpu"):
            hpvm.wait(hpvm.launch(profiled_doubled, a, a.nbytes, b, b.nbytes, len(a)))
            stats = hpvm.stats()
    np.testing.assert_array_equal(b, a * 2)
    trace = checked(path)
    names = track_names(trace)
    copies = of(trace, "copy")
    assert copies
    for e in copies:
        args = e["args"]
        assert e["name"] == args["direction"] in ("h2d", "d2h", "d2d")
        assert args["bytes"] == a.nbytes
        device = args["dst"] if args["direction"] == "h2d" else args["src"]
        assert device.startswith("fake:")
        assert names[(e["pid"], e["tid"])].startswith(f"copy {args['direction']} {device}")
    h2d = [e for e in copies if e["name"] == "h2d"]
    assert len(h2d) == stats["h2d_copies"] and sum(e["args"]["bytes"] for e in h2d) == stats["h2d_bytes"]
    assert sum(e["args"]["bytes"] for e in copies if e["name"] == "d2h") == stats["d2h_bytes"]
    (node,) = of(trace, "node")
    assert node["args"]["copied_bytes"] == {"a": a.nbytes}  # b is written whole: not copied in
    assert hpvm.stats()["times"]["copy"] >= 0


def test_profile_without_a_file_keeps_times_and_profiles_do_not_nest(tmp_path: Path) -> None:
    a = np.ones(8, np.float32)
    b = np.zeros_like(a)
    with hpvm.runtime("python"):
        with hpvm.profile() as prof:
            hpvm.wait(hpvm.launch(profiled_doubled, a, a.nbytes, b, b.nbytes, len(a)))
            with pytest.raises(hpvm.errors.HPVMError, match="already being recorded"):
                with hpvm.profile(tmp_path / "inner.json"):
                    pass
        assert prof.path is None and prof.trace is None and prof.times["launch"] > 0
        assert hpvm.stats()["times"]["launch"] == pytest.approx(prof.times["launch"])
        assert hpvm.stats(reset=True)["times"]["launch"] > 0
        assert hpvm.stats()["times"]["launch"] == 0
    assert not (tmp_path / "inner.json").exists()
    # off: nothing is recorded
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(profiled_doubled, a, a.nbytes, b, b.nbytes, len(a)))
        assert not any(hpvm.stats()["times"].values())


def test_trace_is_written_when_the_block_fails(tmp_path: Path) -> None:
    path = tmp_path / "failed.json"
    with pytest.raises(ZeroDivisionError):
        with hpvm.profile(path), hpvm.runtime("python"):
            a = np.ones(8, np.float32)
            hpvm.wait(hpvm.launch(profiled_doubled, a, a.nbytes, np.zeros_like(a), a.nbytes, len(a)))
            1 / 0  # noqa: B018
    assert of(checked(path), "launch") and not P.on


def test_overlapping_events_of_a_track_go_to_a_second_lane() -> None:
    prof = P.Profile(None)
    prof.add("stage", "s #0", 0, 10_000, "stage s", None)
    prof.add("stage", "s #1", 5_000, 15_000, "stage s", None)  # starts before #0 ends
    prof.add("stage", "s #2", 15_000, 20_000, "stage s", None)
    P._untangle(prof)
    tracks = {name: tid for name, tid in prof.tracks.items()}
    assert [e["tid"] for e in prof.events] == [tracks["stage s"], tracks["stage s (2)"], tracks["stage s"]]


def test_hpvmc_run_trace_and_viz_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "saxpy.json"
    program = ROOT / "examples" / "saxpy.py"
    assert hpvmc(["run", str(program), "--target", "python", "--trace", str(trace)]) == 0
    loaded = checked(trace)
    assert of(loaded, "launch") and of(loaded, "kernel")
    dot = tmp_path / "saxpy.dot"
    assert hpvmc(["viz", str(program), "--profile", str(trace), "-o", str(dot)]) == 0
    text = dot.read_text()
    assert "#d7301f" in text and re.search(r"\\n[0-9.e+-]+ m?s\"", text)  # the slowest node: red, its time
    # a graph launched with --set, traced; its picture's binds carry the bytes copied (none here)
    assert hpvmc(["run", str(program), "--graph", "root", "--target", "python", "--set", "x=100",
                  "--set", "y=100", "--set", "alpha=2", "--set", "n=100", "--trace", str(trace)]) == 0
    assert [e["name"].startswith("root") for e in of(checked(trace), "launch")] == [True]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert hpvmc(["viz", str(program), "--profile", str(bad), "-o", str(dot)]) == 1
    assert "not a readable Chrome-trace" in capsys.readouterr().err


def test_viz_colours_edges_by_bytes() -> None:
    from hpvm_py.ir.dot import module_to_dot

    module = profiled_doubled.module()
    root = module.root_func
    key = (root.name, root.nodes[0].name)
    summary = {"times": {key: 0.5}, "bytes": {key + ("a",): 4096}}
    text = module_to_dot(module, profile=summary)
    assert 'xlabel="4 KB"' in text and "penwidth=6.00" in text and "500 ms" in text
    assert "xlabel" not in module_to_dot(module)


@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}")
def test_two_ranks_write_one_merged_trace(tmp_path: Path) -> None:
    path = tmp_path / "ranks.json"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HPVM_COMM_")}
    environment.update(PYTHONPATH=str(ROOT), HPVM_HEAP_BYTES="8M", HPVM_NUM_THREADS="1",
                       OMP_NUM_THREADS="1")
    command = [str(MPIEXEC), "-n", "2", sys.executable,
               str(ROOT / "tests" / "programs" / "dist_profile.py"), str(path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=environment)
    assert result.returncode == 0, result.stdout + result.stderr
    trace = checked(path)
    processes = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert processes == {0: "rank 0", 1: "rank 1"}
    collectives = of(trace, "collective")
    assert sorted(e["pid"] for e in collectives) == [0, 0, 1, 1]
    assert all(e["args"]["kind"] == "all_reduce" and e["args"]["bytes"] == 1024 and
               e["args"]["ranks"] == 2 and e["args"]["rank"] == e["pid"] for e in collectives)
    assert set(trace["otherData"]["hpvm_times"]) == {"0", "1"}
    assert not list(tmp_path.glob("ranks.json.rank*"))  # the parts are merged and removed


def _cuda() -> bool:
    if not registry.available("gpu"):
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU (runs on the GPU machines)")
@pytest.mark.parametrize("target", [
    pytest.param(t, marks=pytest.mark.skipif(not registry.available(t), reason=f"{t} is unavailable"))
    for t in ("gpu", "nvptx")])
def test_gpu_times_from_cuda_events(target: str, tmp_path: Path) -> None:
    """On a GPU: each kernel (also replayed ones) and each copy gets a device time from CUDA
    events on the `gpu DEVICE` tracks, placed within the profile's host time; a stream's stages
    have their tracks."""
    path = tmp_path / "gpu.json"
    n = 1 << 16
    a = np.arange(n, dtype=np.float32)
    b = np.zeros_like(a)
    xs = [np.full(256, i, np.float32) for i in range(4)]
    ys = [np.zeros(256, np.float32) for _ in range(4)]
    with hpvm.profile(path):
        with hpvm.runtime(target):
            for _ in range(4):  # the first runs normally, the others replay (the last ones may
                hpvm.wait(hpvm.launch(profiled_doubled, a, a.nbytes, b, b.nbytes, n))  # be a CUDA graph)
                hpvm.request_memory(b)
            handle = hpvm.launch(S.two_stages, stream=True)
            for x, y in zip(xs, ys):
                hpvm.push(handle, x, x.nbytes, y, y.nbytes, 2.0, 256)
            hpvm.wait(handle)
            times = hpvm.stats()["times"]
    np.testing.assert_array_equal(b, a * 2)
    trace = checked(path)
    names = track_names(trace)
    gpu_kernels = of(trace, "gpu_kernel")
    assert gpu_kernels and all(names[(e["pid"], e["tid"])].startswith("gpu cuda") for e in gpu_kernels)
    (leaf,) = hpvm.compile(profiled_doubled, target).plan.nodes
    assert {shown_name(leaf.func)} <= {e["name"] for e in gpu_kernels}
    gpu_copies = of(trace, "gpu_copy")
    assert gpu_copies and all(e["args"]["bytes"] > 0 for e in gpu_copies)
    host = [e for e in trace["traceEvents"] if e["ph"] == "X" and not e["cat"].startswith("gpu_")]
    start, end = min(e["ts"] for e in host), max(e["ts"] + e["dur"] for e in host)
    for e in gpu_kernels + gpu_copies:  # on the host's timeline (within a millisecond)
        assert start - 1000 <= e["ts"] and e["ts"] + e["dur"] <= end + 1000, e
    assert times["gpu_kernel"] > 0 and times["gpu_copy"] > 0
    stages = {names[(e["pid"], e["tid"])] for e in of(trace, "stage")}
    names_of_stages = {f"stage {node.name}" for node in hpvm.compile(S.two_stages, target).plan.nodes}
    assert names_of_stages <= {s.split(" (")[0] for s in stages}


def test_a_replay_writes_the_node_and_kernel_events_of_the_launch_it_repeats(tmp_path) -> None:
    """A replayed launch (rt/replay.py) writes the same "node" events (each level of a chain of
    internal nodes down to the leaf) and "kernel" event args as the normal path, marked replayed:
    `hpvmc viz --profile` drew a loop's nodes as "not run" when every launch but the first was a
    replay. (On cpu: the gpu target does not replay this graph, whose leaf's bounds proof depends
    on data it reads.)"""
    from tests.programs import nested_graphs as g

    rng = np.random.default_rng(3)
    n, lanes, blocks = 20, 8, 3
    x = rng.standard_normal(n).astype(np.float32)
    at = rng.integers(0, n, n).astype(np.int64)
    y = np.zeros(n, np.float32)
    path = tmp_path / "trace.json"
    with hpvm.runtime("cpu"), hpvm.profile(str(path)):
        for _ in range(3):
            hpvm.wait(hpvm.launch(g.gather_nested, x, x.nbytes, at, at.nbytes, y, y.nbytes, n, 0.5,
                                  lanes, blocks))
    np.testing.assert_allclose(y, 3 * 0.5 * x[at], rtol=1e-6)
    trace = checked(path)
    launches = of(trace, "launch")
    assert [e["args"]["replayed"] for e in launches] == [False, True, True]

    def per_launch(cat: str) -> list[list[tuple[str, dict]]]:
        events = sorted(of(trace, cat), key=lambda e: e["ts"])
        return [[(e["name"], {k: v for k, v in e["args"].items()
                              if k not in ("replayed", "edge_bytes", "copied_bytes")})
                 for e in events if launch["ts"] <= e["ts"] <= launch["ts"] + launch["dur"]]
                for launch in sorted(launches, key=lambda e: e["ts"])]

    nodes, kernels = per_launch("node"), per_launch("kernel")
    # (IR names are unique per process: a graph built again gets a suffix)
    assert [(re.sub(r"_\d+$", "", name), a["kind"]) for name, a in nodes[0]] == [
        ("gather_wrapper", "internal"), ("gather_blocks", "internal"), ("gather_add", "leaf")]
    assert nodes[0][-1][1]["instances"] == blocks * lanes
    assert nodes[1] == nodes[0] and nodes[2] == nodes[0]
    assert len(kernels[0]) == 1 and kernels[1] == kernels[0] and kernels[2] == kernels[0]
    assert all(e["args"]["replayed"] for e in of(trace, "node") + of(trace, "kernel")
               if e["ts"] > sorted(launches, key=lambda e: e["ts"])[1]["ts"])
