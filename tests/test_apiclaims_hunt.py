"""Claims of the host API's docs (docs/api.md, docs/streaming.md, docs/runtime.md), checked
adversarially: every mistake is an HPVMError at the user's line, never an internal error."""
from __future__ import annotations

import collections
import io
import os

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import LaunchError, StreamError

from errcheck import check_error
from programs import api_prog as P

HERE = os.path.abspath(__file__)


@pytest.fixture(params=["python", "cpu"])
def rt(request):
    with hpvm.runtime(request.param):
        yield request.param


def test_wait_push_and_pop_refuse_objects_that_are_no_handle(rt):
    """wait(), push() and pop() checked a handle by its methods' names, so any object with a
    close() or pop() (a file, a generator, a list, a dict) had that method called: an internal
    TypeError or KeyError instead of the error saying what they take."""
    with pytest.raises(LaunchError) as info:
        hpvm.wait(io.StringIO())  # ERR:wait-file
    check_error(info.value, LaunchError, HERE, "wait-file", None)
    with pytest.raises(LaunchError) as info:
        hpvm.wait(x for x in ())  # ERR:wait-generator
    check_error(info.value, LaunchError, HERE, "wait-generator", None)
    with pytest.raises(StreamError) as info:
        hpvm.pop([1, 2, 3])  # ERR:pop-list
    check_error(info.value, StreamError, HERE, "pop-list", None)
    with pytest.raises(StreamError) as info:
        hpvm.pop({})  # ERR:pop-dict
    check_error(info.value, StreamError, HERE, "pop-dict", None)
    with pytest.raises(StreamError) as info:
        hpvm.pop(collections.deque([1]), timeout=1)  # ERR:pop-deque
    check_error(info.value, StreamError, HERE, "pop-deque", None)

    class Pusher:
        def push(self, *args):
            return None

    with pytest.raises(StreamError) as info:
        hpvm.push(Pusher(), 1)  # ERR:push-duck
    check_error(info.value, StreamError, HERE, "push-duck", None)
    # the real handles still work
    a = np.random.default_rng().random(8, dtype=np.float32)
    c = np.zeros(8, np.float32)
    s = hpvm.launch(P.vinc, stream=True)
    hpvm.push(s, a, c, 8)
    assert hpvm.pop(s, timeout=60) == ()
    hpvm.wait(s, timeout=60)
    np.testing.assert_array_equal(c, a + np.float32(1))
