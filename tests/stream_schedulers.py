"""Run a stream test once per way a target can run a stream's stages: a module imports
`pytest_generate_tests` and `use_scheduler` from here, and its tests that take `target` and
`scheduler` run on each target with each runner it can use: whole items ("items": the gpu
target's, rt/stream/items.py), the scheduler thread (HPVM_STREAM_ITEMS=0), or a thread per
stage (the scheduler refused as well)."""
from __future__ import annotations

import pytest

from conftest import TARGETS
from hpvm_py.rt.stream import stages, streaming

SCHEDULERS = ["threads", "scheduler", "items"]
# the runners a target can use: python leaves always get a thread per stage, whole items are
# the gpu target's
USABLE = {"python": {"threads"}, "cpu": {"threads", "scheduler"}, "nvptx": {"threads", "scheduler"}}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests that take a scheduler run on each target with each scheduler it can use."""
    if "scheduler" in metafunc.fixturenames:
        pairs = [(t, s) for t in TARGETS for s in SCHEDULERS if s in USABLE.get(t, set(SCHEDULERS))]
        metafunc.parametrize("target, scheduler", pairs, ids=[f"{t}-{s}" for t, s in pairs])


@pytest.fixture(autouse=True)
def use_scheduler(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner the test's `scheduler` names, for the streams it starts."""
    if "scheduler" not in request.fixturenames:
        return
    name = request.getfixturevalue("scheduler")
    if name != "items":
        monkeypatch.setenv("HPVM_STREAM_ITEMS", "0")
    if name == "threads":
        monkeypatch.setattr(streaming, "SCHEDULERS", (stages.StageThreads,))
