"""Communication nodes on GPU ranks: joining (setup.py), the device symmetric heap (heap.py), the
flag protocol (signals.py), the Triton collective kernels (kernels.py), their launch (launch.py,
with replay.py's graphs), the runner of communication nodes (runner.py) and NCCL across hosts
(engine.py). See docs/distributed.md, "GPU ranks".
"""
