"""Which CUDA stream each kernel of a replayed GPU launch runs on, and which edges need events.

Independent siblings may run at the same time (the language reference orders only nodes joined by
a path of edges), so the root's leaves are spread over streams: a node continues the stream of its
first producer that no other node continued yet, else it opens a stream (at most MAX_STREAMS, then
they are reused in turn: the events keep reuse correct). A node waits for the event of every
producer on another stream. A pure function of the plan: device/streams.py does the CUDA
(or fake-device) operations.
"""
from __future__ import annotations

from dataclasses import dataclass

from .plan import NodePlan

MAX_STREAMS = 4


@dataclass(frozen=True)
class StreamPlan:
    stream_of: tuple[int, ...]  # per node; 0 is the stream the launch was made on
    waits: tuple[tuple[int, ...], ...]  # per node: producers on other streams
    used: tuple[int, ...]  # the streams other than 0 that run something

    @property
    def recorded(self) -> frozenset[int]:
        """The nodes whose completion another stream waits for."""
        return frozenset(p for waits in self.waits for p in waits)


def assign_streams(nodes: list[NodePlan]) -> StreamPlan:
    stream_of: list[int] = []
    waits: list[tuple[int, ...]] = []
    continued: set[int] = set()
    opened = 0
    for node in nodes:
        producers = sorted({src.node for src in node.inputs if src.node is not None})
        free = [p for p in producers if p not in continued]
        if free:
            continued.add(free[0])
            stream = stream_of[free[0]]
        else:
            stream = opened % MAX_STREAMS
            opened += 1
        stream_of.append(stream)
        waits.append(tuple(p for p in producers if stream_of[p] != stream))
    used = tuple(sorted(set(stream_of) - {0}))
    return StreamPlan(tuple(stream_of), tuple(waits), used)
