"""Communication nodes on GPU ranks: the device symmetric heap (heap.py), the Triton collective
kernels (kernels.py, on the flags of signals.py), their launch (launch.py) and the runner that the
gpu and nvptx targets use (runner.py). See docs/distributed.md, "GPU ranks".
"""
