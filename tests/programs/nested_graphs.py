"""Graphs for tests/test_replay_nested.py: leaves at the bottom of chains of single-node internal
nodes (a wrapper, a grid of blocks, the leaf), as HPVM-C programs nest them; a replay records the
leaf through every level (NodePlan.recorded_leaf, rt/replay.py lifted_sources)."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64


@hpvm.leaf
def gather_add(x: In[Ptr[f32]], x_bytes: i64, at: In[Ptr[i64]], at_bytes: i64,
               y: InOut[Ptr[f32]], y_bytes: i64, n: i64, k: f32):
    """y[i] += x[at[i]] * k for i = block * lanes + lane < n (the index of x comes from data)."""
    this = hpvm.get_node()
    block = hpvm.get_node_instance_id_x(hpvm.get_parent_node(this))
    i = block * hpvm.get_num_node_instances_x(this) + hpvm.get_node_instance_id_x(this)
    if i < n:
        y[i] = y[i] + x[at[i]] * k


@hpvm.graph
def gather_blocks(n: i64, lanes: i64, at: In[Ptr[i64]], at_bytes: i64, k: f32, x: In[Ptr[f32]],
                  x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64):
    hpvm.node(gather_add, grid=lanes, x=x, x_bytes=x_bytes, at=at, at_bytes=at_bytes, y=y,
              y_bytes=y_bytes, n=n, k=k)


@hpvm.graph
def gather_wrapper(blocks: i64, lanes: i64, k: f32, n: i64, y: InOut[Ptr[f32]], y_bytes: i64,
                   at: In[Ptr[i64]], at_bytes: i64, x: In[Ptr[f32]], x_bytes: i64):
    # (each level orders its parameters its own way: a replay must follow every bind)
    hpvm.node(gather_blocks, grid=blocks, x=x, x_bytes=x_bytes, at=at, at_bytes=at_bytes, y=y,
              y_bytes=y_bytes, n=n, k=k, lanes=lanes)


@hpvm.graph
def gather_nested(x: In[Ptr[f32]], x_bytes: i64, at: In[Ptr[i64]], at_bytes: i64,
                  y: InOut[Ptr[f32]], y_bytes: i64, n: i64, k: f32, lanes: i64, blocks: i64):
    """root -> wrapper (1) -> blocks -> leaf (lanes): three levels above the leaf."""
    hpvm.node(gather_wrapper, x=x, x_bytes=x_bytes, at=at, at_bytes=at_bytes, y=y,
              y_bytes=y_bytes, n=n, k=k, lanes=lanes, blocks=blocks)


@hpvm.leaf
def scale_rows(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, size: i64,
               k: f32):
    row = hpvm.get_node_instance_id_x(hpvm.get_parent_node(hpvm.get_node()))
    col = hpvm.get_node_instance_id_x(hpvm.get_node())
    at = row * hpvm.get_num_node_instances_x(hpvm.get_node()) + col
    if at < size:
        y[at] = x[at] * k


@hpvm.graph
def rows_of(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, rows: i64,
            cols: i64, k: f32):
    hpvm.node(scale_rows, grid=cols, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes,
              size=rows * cols, k=k)


@hpvm.graph
def scale_nested_expr(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, rows: i64,
                      cols: i64, k: f32):
    """y = x * k, the leaf's size an expression given one level down (a source replays do not
    lift: such launches run the normal path)."""
    hpvm.node(rows_of, grid=rows, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, rows=rows,
              cols=cols, k=k)


@hpvm.leaf
def count_written(y: Out[Ptr[f32]], y_bytes: i64, k: f32) -> i64:
    y[hpvm.instance_id(0)] = k
    return y_bytes


@hpvm.graph
def fill_counted(y: Out[Ptr[f32]], y_bytes: i64, n: i64, k: f32) -> i64:
    node = hpvm.node(count_written, grid=n, y=y, y_bytes=y_bytes, k=k)
    return node.out[0]


@hpvm.graph
def fill_nested_output(y: Out[Ptr[f32]], y_bytes: i64, n: i64, k: f32) -> i64:
    """y[:n] = k; the leaf's output travels up two levels to the root's (never recorded)."""
    node = hpvm.node(fill_counted, y=y, y_bytes=y_bytes, n=n, k=k)
    return node.out[0]


@hpvm.leaf
def set_index(at: InOut[Ptr[i64]], at_bytes: i64, j: i64, v: i64):
    at[j] = v


@hpvm.graph
def poke(at: InOut[Ptr[i64]], at_bytes: i64, j: i64, v: i64):
    """at[j] = v on the launch's target: data a tracked buffer holds where the kernels run."""
    hpvm.node(set_index, at=at, at_bytes=at_bytes, j=j, v=v)


@hpvm.leaf
def scale_sized(x: In[Ptr[f32]], x_bytes: i64, h: InOut[Ptr[f32]], h_bytes: i64, k: f32) -> i64:
    i = hpvm.instance_id(0)
    if i * 4 < h_bytes and i * 4 < x_bytes:
        h[i] = x[i] * k
    return h_bytes


@hpvm.graph
def scale_stage(x: In[Ptr[f32]], x_bytes: i64, h: InOut[Ptr[f32]], h_bytes: i64, n: i64,
                k: f32) -> i64:
    stage = hpvm.node(scale_sized, grid=n, x=x, x_bytes=x_bytes, h=h, h_bytes=h_bytes, k=k)
    return stage.out[0]


@hpvm.leaf
def offset_sized(h: In[Ptr[f32]], h_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, c: f32) -> i64:
    i = hpvm.instance_id(0)
    if i * 4 < h_bytes and i * 4 < y_bytes:
        y[i] = h[i] + c
    return y_bytes


@hpvm.graph
def sized_stages(x: InOut[Ptr[f32]], x_bytes: i64, h: InOut[Ptr[f32]], h_bytes: i64,
                 y: InOut[Ptr[f32]], y_bytes: i64, n: i64, k: f32, c: f32):
    """y = x * k + c in two stages, as HPVM-C writes them: each returns the size it was given, and
    the next takes its buffer's size from that edge (a wrapper, then a root leaf; the second
    stage's size also bounds its accesses)."""
    first = hpvm.node(scale_stage, x=x, x_bytes=x_bytes, h=h, h_bytes=h_bytes, n=n, k=k)
    second = hpvm.node(offset_sized, grid=n, h=h, h_bytes=hpvm.all_to_all(first.out[0]), y=y,
                       y_bytes=y_bytes, c=c)
    hpvm.node(scale_stage, x=y, x_bytes=hpvm.all_to_all(second.out[0]), h=x, h_bytes=x_bytes,
              n=n, k=1.0)
