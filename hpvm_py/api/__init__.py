"""The host API that `hpvm_py` re-exports: the runtime's lifecycle, launch/wait/push/pop and memory
tracking (host.py), and textual IR (textio.py)."""
