"""The launch-time bounds proof: which launches may run unchecked compiled code."""
from __future__ import annotations

import numpy as np
import pytest

import histogram
import reduction
import saxpy
import sgemm
import stencil
import vadd
from hpvm_py.backends.base import BufferArg
from hpvm_py.passes.bounds import BoundsProof
from hpvm_py.rt.compiler import compile_graph


def proofs_for(root, args: list) -> dict[str, bool]:
    """Run the analysis for every leaf of root as a launch with args would."""
    from hpvm_py.rt.args import bind_arguments
    from hpvm_py.rt.executor import BoundBuffer, Executor
    from hpvm_py.rt.tracker import MemoryTracker

    compiled = compile_graph(root, "python")
    results: dict[str, bool] = {}

    class Spy(Executor):
        def _leaf(self, node, call, ext, ancestors, parents, count, *rest):
            values = [BufferArg(v.obj.user, 0, v.obj.nbytes, None) if isinstance(v, BoundBuffer) else v
                      for v in call]
            results[node.func.name] = BoundsProof(node.func, node.ctx).holds(values, [ext] + ancestors)
            return [None] * len(node.func.outputs)

    tracker = MemoryTracker()
    env = bind_arguments(compiled.module.root_func, tuple(args), tracker, {"host"})
    try:
        Spy(tracker).run(compiled.plan, env)
    except Exception:  # the spy skips the kernels: later nodes may lack their inputs
        pass
    return results


def f32(*shape):
    return np.zeros(shape, np.float32)


def test_unguarded_vadd_is_proven_when_sizes_match() -> None:
    a = f32(1000)
    assert proofs_for(vadd.root, [a, a.nbytes, a, a.nbytes, a, a.nbytes, 1000]) == {vadd.vadd.name: True}
    # the grid is one larger than the buffers: an access may be out of bounds
    assert proofs_for(vadd.root, [a, a.nbytes, a, a.nbytes, a, a.nbytes, 1001]) == {vadd.vadd.name: False}
    # a size argument smaller than the buffer is the limit
    assert proofs_for(vadd.root, [a, a.nbytes, a, a.nbytes - 4, a, a.nbytes, 1000]) == {vadd.vadd.name: False}


def test_guards_refine_the_index() -> None:
    x = f32(1000)
    assert proofs_for(saxpy.root, [x, x.nbytes, x, x.nbytes, 2.0, 1000]) == {saxpy.saxpy.name: True}


def test_nested_guards_of_a_3d_stencil() -> None:
    a = f32(6, 20, 30)
    assert proofs_for(stencil.root, [a, a.nbytes, a, a.nbytes, 30, 20, 6, 0.1, 0.2]) == {stencil.stencil_block.name: True}
    small = f32(4, 20, 30)  # nz says 6 planes (interior writes reach plane 4), the buffer holds 4
    assert proofs_for(stencil.root, [a, a.nbytes, small, small.nbytes, 30, 20, 6, 0.1, 0.2]) == \
        {stencil.stencil_block.name: False}


def test_python_modulo_bounds_a_data_dependent_index() -> None:
    d = np.arange(100, dtype=np.int32)
    bins = np.zeros(256, np.int32)
    assert proofs_for(histogram.root, [d, d.nbytes, bins, bins.nbytes, 256, 100]) == {histogram.histogram.name: True}
    assert proofs_for(histogram.root, [d, d.nbytes, bins, bins.nbytes, 257, 100]) == {histogram.histogram.name: False}


def test_loops_with_shrinking_strides_and_scratch_memory() -> None:
    x = f32(1000)
    partial = f32(8)
    assert proofs_for(reduction.root, [x, x.nbytes, partial, partial.nbytes, 1000])[reduction.block_sum.name] is True


def test_relational_guards_of_a_tiled_sgemm() -> None:
    m, n, k = 40, 24, 20
    a, b, c = f32(m, k), f32(k, n), f32(m, n)
    assert proofs_for(sgemm.root, [a, a.nbytes, b, b.nbytes, c, c.nbytes, m, n, k, 1.0, 0.0]) == \
        {sgemm.sgemm_tile.name: True}
    # claim a larger k than b holds: the guard no longer protects the reads of b
    assert proofs_for(sgemm.root, [a, a.nbytes, b, b.nbytes, c, c.nbytes, m, n, k + 4, 1.0, 0.0]) == \
        {sgemm.sgemm_tile.name: False}


@pytest.mark.parametrize("n", [1, 7, 64])
def test_a_proven_launch_really_stays_in_bounds(n: int) -> None:
    """Soundness spot check: a proven launch runs on the (fully checked) python target cleanly."""
    import hpvm_py as hpvm

    d = np.arange(n, dtype=np.int32) - 3
    bins = np.zeros(16, np.int32)
    assert proofs_for(histogram.root, [d, d.nbytes, bins, bins.nbytes, 16, n])[histogram.histogram.name]
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(histogram.root, d, d.nbytes, bins, bins.nbytes, 16, n))
    assert bins.sum() == n


def test_a_proof_depends_on_buffers_their_sizes_and_the_integers_read() -> None:
    """An integer the body never reads (an edge that only orders the node) cannot change a proof:
    a replay need not bring it to the host to decide; a buffer's size argument can, read or not."""
    from hpvm_py.ir.context import NodeContext
    from programs import gpu_replay_graphs as g

    leaf = g.add_after.ir
    ctx = NodeContext(level_dims=(1,), input_modes=("uniform", "buffer", "uniform", "buffer", "uniform",
                                                    "uniform"), output_modes=())
    proof = BoundsProof(leaf, ctx)
    assert [leaf.params[i].name for i in proof.relevant] == ["h", "h_bytes", "y", "y_bytes"]
    args = [np.int64(7), BufferArg(None, 0, 64, None), np.int64(64), BufferArg(None, 0, 64, None),
            np.int64(64), np.float32(1)]
    assert proof.holds(args, [(16,)]) and not proof.holds(args, [(17,)])
    args[2] = np.int64(60)  # h's size argument: 15 elements
    assert not proof.holds(args, [(16,)])


def test_windows_clamped_at_the_image_edges_are_proven() -> None:
    """The edge-detection port's Gaussian and Sobel leaves clamp each tap's offset by moving it
    back by the amount it overshoots (if/elif chains): in bounds on every path through them, which
    the exact affine forms kept per path show; one element short of the image is not."""
    from hpvm_suite import pipeline as p

    m, n = 24, 32
    image, nbytes = f32(m, n), m * n * 4
    smooth, grad = f32(m, n), f32(m, n)
    gaussian = [image, nbytes, p.GAUSS.copy(), 196, smooth, nbytes, m, n]
    sobel = [smooth, nbytes, p.SOBEL_X.copy(), 36, p.SOBEL_Y.copy(), 36, grad, nbytes, m, n]
    smoothing, gradient = p.gaussian_smoothing.name, p.compute_gradient.name
    assert proofs_for(p.wrapper_gaussian_smoothing, gaussian) == {smoothing: True}
    assert proofs_for(p.wrapper_compute_gradient, sobel) == {gradient: True}
    gaussian[1] = nbytes - 4
    sobel[1] = nbytes - 4
    assert proofs_for(p.wrapper_gaussian_smoothing, gaussian) == {smoothing: False}
    assert proofs_for(p.wrapper_compute_gradient, sobel) == {gradient: False}


def test_neighbours_chosen_by_the_rows_parity_are_proven() -> None:
    """The camera pipeline's demosaic reads the row above only on odd rows and the row below only
    on even ones (its last branch is odd by elimination): proven for an even number of rows,
    from the residues the conditions leave. With an odd number the last row is even, and its
    neighbour below is past the image: not proven."""
    from hpvm_suite import cava

    for rows, cols, proven in ((6, 8, True), (480, 640, True), (7, 8, False), (5, 9, False)):
        image = f32(3 * rows * cols)
        result = f32(3 * rows * cols)
        args = [image, image.nbytes, result, result.nbytes, rows, cols]
        assert proofs_for(cava.demosaic_fxp_wrapper, args) == {cava.demosaic_fxp.name: proven}, (rows, cols)
