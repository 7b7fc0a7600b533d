"""The differential fuzzer's programs on nvptx against the cpu target, bit for bit.

Both targets share the lowering of the kernel IR, and the cpu target is checked against the
python reference by tests/test_differential.py; here the generated leaf `body` runs kernel by
kernel on both (its buffers, its returned value per instance), so that a difference names the
kernel rather than the whole graph. Needs a GPU (skipped elsewhere, with the reason).
HPVM_NVPTX_DIFF_EXAMPLES sets the number of programs (default 100).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from differential import data
from cpu_harness import buffer, device_buffer
from differential.generator import Program, programs
from hpvm_py import types as T
from hpvm_py.backends.nvptx import device
from hpvm_py.rt.compiler import compile_graph
from hpvm_py.types import PtrType

pytestmark = pytest.mark.skipif(device.unusable_reason() is not None,
                                reason=f"target nvptx cannot run here: {device.unusable_reason()}")


EXAMPLES = int(os.environ.get("HPVM_NVPTX_DIFF_EXAMPLES", "100"))


def body_kernel(program_module: object, target: str):
    name = program_module.body.ir.name  # IR names are unique per process: body, body_2, ...
    for leaf, ctx, kernel in compile_graph(program_module.root, target).leaf_kernels():
        if leaf.name == name:
            return leaf, ctx, kernel
    raise AssertionError("no body leaf")


def run_body(kernel, leaf, ctx, inputs: dict, p: int, l: int, on_gpu: bool) -> dict[str, np.ndarray]:
    arrays = {k: inputs[k].copy() for k in ("a", "b", "out", "hist")}
    extents = [(l,), (p,)] if len(ctx.level_dims) == 2 else [(p * l,)]
    args, copies = [], []
    for param, mode in zip(leaf.params, ctx.input_modes):
        if isinstance(param.type, PtrType):
            array = arrays[param.name]
            if on_gpu:
                tensor = torch.from_numpy(array.view(np.uint8)).to("cuda")
                copies.append((array, tensor))
                args.append(device_buffer(tensor))
            else:
                args.append(buffer(array))
        elif param.name.endswith("_bytes"):
            value = np.int64(arrays[param.name[:-len("_bytes")]].nbytes)
            args.append(value if mode == "uniform" else np.full(p, value))
        else:
            value = inputs[param.name]
            args.append(value if mode == "uniform" else np.full(p, value))
    outputs = []
    for port, mode in zip(leaf.outputs, ctx.output_modes):
        size = {"per_parent": p, "per_instance": p * l}.get(mode)
        outputs.append(None if size is None else np.zeros(size, port.type.numpy_dtype))
    kernel.launch(args, outputs, extents)
    for array, tensor in copies:
        array.view(np.uint8)[:] = tensor.cpu().numpy()
    result = {"out": arrays["out"], "hist": arrays["hist"]}
    for j, out in enumerate(outputs):
        if out is not None:
            result[f"return{j}"] = out
    return result


@settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(program=programs(), seed=st.integers(0, 2**32 - 1),
       shape=st.tuples(st.integers(1, 3), st.integers(1, 300)))
def test_nvptx_agrees_with_cpu(program: Program, seed: int, shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(seed)
    p, l = shape if program.hierarchical else (1, shape[0] * shape[1])
    n = p * l
    a_t, b_t, s_t = program.in_types
    inputs = {"a": data.values(a_t, n, rng), "b": data.values(b_t, n, rng),
              "out": np.zeros(n, T.SCALAR_TYPES[program.out_type].numpy_dtype),
              "hist": rng.integers(-5, 5, 16, dtype=np.int32),
              "s": data.scalar(s_t, rng), "n": np.int64(n)}
    module = data.load(program.source)
    leaf, ctx, cpu_kernel = body_kernel(module, "cpu")
    _, _, gpu_kernel = body_kernel(module, "nvptx")
    expected = run_body(cpu_kernel, leaf, ctx, inputs, p, l, on_gpu=False)
    got = run_body(gpu_kernel, leaf, ctx, inputs, p, l, on_gpu=True)
    types = {"out": program.out_type, "hist": "i32"}
    for name, value in expected.items():
        t = types.get(name) or leaf.outputs[int(name[len("return"):])].type.name
        assert data.same(got[name], value, t), (
            f"nvptx and cpu disagree on {name}\n--- program ---\n{program.source}\n--- inputs ---\n"
            f"{ {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()} }\n"
            f"--- cpu ---\n{value.tolist()}\n--- nvptx ---\n{got[name].tolist()}")
