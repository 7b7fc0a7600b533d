"""Graphs for tests/test_lanes.py: leaves replicated over rows that loop over columns, which
nvptx may split over the threads of each instance (passes/lanes.py), and leaves it must not."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64


@hpvm.leaf
def window_sums(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, cols: i64,
                width: i64, shift: i64, k: f32) -> i64:
    """Per column: a sum over 8 neighbours (wrapping in the row), stored at col and, doubled, at
    col + shift: two iterations store to one element when 0 < |shift| < cols."""
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    base = row * width
    for col in range(cols):
        acc: f32 = 0.0
        for t in range(8):
            acc += x[base + (col + t) % width] * k
        y[base + col] = acc
        y[base + col + shift] = acc * 2.0
    return y_bytes


@hpvm.graph
def windows(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, rows: i64,
            cols: i64, width: i64, shift: i64, k: f32) -> i64:
    node = hpvm.node(window_sums, grid=rows, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, cols=cols,
                     width=width, shift=shift, k=k)
    return node.out[0]


@hpvm.leaf
def running_sums(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, cols: i64,
                 width: i64):
    """A prefix sum along the row: each iteration reads the last one's value (never split)."""
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    run: f32 = 0.0
    for col in range(cols):
        run = run + x[row * width + col]
        y[row * width + col] = run


@hpvm.graph
def prefix(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, rows: i64, cols: i64,
           width: i64):
    hpvm.node(running_sums, grid=rows, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, cols=cols,
              width=width)


@hpvm.leaf
def planes(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, cols: i64,
           plane: i64, k: f32):
    """Three planes per row, `plane` elements apart in the row's own span of 2 * plane + cols:
    planes overlap when plane < cols, and then the channel stored last wins, as in order."""
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    for chan in range(3):
        for col in range(cols):
            y[row * (2 * plane + cols) + chan * plane + col] = x[row * cols + col] * k + chan


@hpvm.graph
def channels(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, rows: i64,
             cols: i64, plane: i64, k: f32):
    hpvm.node(planes, grid=rows, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, cols=cols,
              plane=plane, k=k)
