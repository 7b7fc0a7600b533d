"""The whole world's mixture-of-experts dispatch and combine, written plainly (loops, no shared code
with hpvm_py), for the multi-rank test programs: every rank computes every rank's inputs from the
seed and checks its own outputs against this."""
import numpy as np


def routes(rng: np.random.Generator, world: int, tokens: int, experts: int, kind: str) -> list[np.ndarray]:
    """Every rank's expert ids. kind: "uniform" (some -1), "skewed" (every row to the experts of
    the last rank, one of them never), "empty" (every row nowhere)."""
    out = []
    for _ in range(world):
        if kind == "uniform":
            r = rng.integers(-1, experts, tokens)
        elif kind == "skewed":
            local = experts // world
            mine = np.arange(experts - local, experts)
            choices = mine[1:] if local > 1 else mine
            r = rng.choice(choices, tokens)
        else:
            r = np.full(tokens, -1)
        out.append(r.astype(np.int32))
    return out


def dispatch(routes: list[np.ndarray], tokens: list[np.ndarray], experts: int, capacity: int) -> dict:
    """Per rank q: recv[q] (local x capacity x hidden; rows not received are NaN), counts[q]
    (world x local), origin[q] (local x capacity x 2), and slot[q] (one per row)."""
    world = len(routes)
    local = experts // world
    hidden = tokens[0].shape[1]
    recv = [np.full((local, capacity, hidden), np.nan) for _ in range(world)]
    counts = [np.zeros((world, local), dtype=np.int64) for _ in range(world)]
    origin = [np.full((local, capacity, 2), -1, dtype=np.int64) for _ in range(world)]
    slot = [np.full(len(r), -1, dtype=np.int64) for r in routes]
    for e in range(experts):
        owner, column = e // local, e % local
        position = 0
        for s in range(world):
            for i, r in enumerate(routes[s]):
                if r != e:
                    continue
                counts[owner][s, column] += 1
                if position < capacity:
                    recv[owner][column, position] = tokens[s][i]
                    origin[owner][column, position] = (s, i)
                    slot[s][i] = e * capacity + position
                position += 1
    return {"recv": recv, "counts": counts, "origin": origin, "slot": slot}


def combine(slot: list[np.ndarray], expert_outs: list[np.ndarray], experts: int, capacity: int,
            gates: list[np.ndarray] | None) -> list[np.ndarray]:
    """Per rank: out[i] = gate[i] * the expert output of slot[i] (0 where slot[i] is -1), in float64."""
    world = len(slot)
    local = experts // world
    outs = []
    for q in range(world):
        out = np.zeros((len(slot[q]), expert_outs[0].shape[-1]))
        for i, s in enumerate(slot[q]):
            if s >= 0:
                e, position = divmod(int(s), capacity)
                row = expert_outs[e // local][e % local, position]
                out[i] = row * (gates[q][i] if gates is not None else 1.0)
        outs.append(out)
    return outs
