"""hpvm.stats()'s counters (support/stats.py): bump_all only appends, and every reader adds the
pending counts in first, so no count is lost or read late, from one thread or many."""
import threading

import pytest

from hpvm_py.support import stats


@pytest.fixture
def clean_stats():
    saved = stats.snapshot()
    stats.reset()
    yield
    stats.reset()
    stats.bump_all(saved)


def test_pending_counts_are_read_by_count_and_snapshot(clean_stats) -> None:
    stats.bump_all({"launches": 1, "kernel_launches": 3})
    stats.bump("launches")
    assert stats.count("launches") == 2 and stats.count("kernel_launches") == 3
    stats.bump_all({"launches": 5})
    assert stats.snapshot()["launches"] == 7
    stats.bump_all({"launches": 1})
    stats.reset()
    assert stats.count("launches") == 0 and stats.snapshot() == {}


def test_many_pending_counts_are_folded_as_they_come(clean_stats) -> None:
    for _ in range(3 * stats.FOLD_AT + 5):
        stats.bump_all({"replayed_launches": 1, "nodes_run": 2})
    assert len(stats._pending) < stats.FOLD_AT  # bounded without a reader
    assert stats.count("replayed_launches") == 3 * stats.FOLD_AT + 5
    assert stats.count("nodes_run") == 2 * (3 * stats.FOLD_AT + 5)


def test_threads_lose_no_count(clean_stats) -> None:
    def work() -> None:
        for _ in range(5000):
            stats.bump_all({"launches": 1})
            stats.bump("copies")
            if _ % 777 == 0:
                stats.count("launches")  # readers fold while others append

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stats.count("launches") == 20000 and stats.count("copies") == 20000


def test_one_dict_appended_many_times_counts_each_time(clean_stats) -> None:
    """A replay appends the same dict object at every launch (its recording's counts); the fold
    adds each distinct dict once, times its appearances, while other threads append."""
    shared = {"replayed_launches": 1, "nodes_run": 3}
    other = {"replayed_launches": 2}

    def work(k: int) -> None:
        for i in range(7000):
            stats.bump_all(shared)
            stats.bump_all(other if i % 3 == 0 else {"launches": 1})
            if i % (500 + k) == 0:
                stats.snapshot()  # readers fold while others append

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    thirds = 4 * len(range(0, 7000, 3))
    assert stats.count("replayed_launches") == 4 * 7000 + 2 * thirds
    assert stats.count("nodes_run") == 3 * 4 * 7000
    assert stats.count("launches") == 4 * 7000 - thirds
