"""Edge detection as a 6-stage dataflow pipeline (after the HPVM pipeline benchmark).

    gaussian smoothing ──▶ laplacian ──▶ zero crossings ──┐
            └──────────▶ gradient ──▶ max gradient ───────┴──▶ reject zero crossings

Each stage is a child of the root, replicated over the image (w x h instances) except the max
gradient, a single-instance reduction. All-to-all edges order the stages (a stage reads its
neighbours' results, so it waits for the whole previous grid); the max gradient travels as an f32
value on an edge. Launched as a stream, every push is one frame: the stages form a pipeline that
works on several frames at once.
"""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i32, i64

RADIUS = 3  # the Gaussian filter is (2R+1) x (2R+1)
WIDTH = 2 * RADIUS + 1


@hpvm.leaf
def gaussian_smoothing(img: In[Ptr[f32]], img_bytes: i64, gauss: In[Ptr[f32]], gauss_bytes: i64,
                       smooth: Out[Ptr[f32]], smooth_bytes: i64, w: i64, h: i64) -> tuple[i32, i32]:
    x = hpvm.instance_id(0)
    y = hpvm.instance_id(1)
    acc = 0.0
    for i in range(-RADIUS, RADIUS + 1):
        yy = min(max(y + i, 0), h - 1)
        for j in range(-RADIUS, RADIUS + 1):
            xx = min(max(x + j, 0), w - 1)
            acc += gauss[(i + RADIUS) * WIDTH + j + RADIUS] * img[yy * w + xx]
    smooth[y * w + x] = acc
    return 1, 1


@hpvm.leaf
def laplacian(ready: i32, smooth: In[Ptr[f32]], smooth_bytes: i64, lap: Out[Ptr[f32]],
              lap_bytes: i64, w: i64, h: i64) -> i32:
    x = hpvm.instance_id(0)
    y = hpvm.instance_id(1)
    centre = smooth[y * w + x]
    dilated = centre
    eroded = centre
    for i in range(max(y - 1, 0), min(y + 2, h)):
        for j in range(max(x - 1, 0), min(x + 2, w)):
            v = smooth[i * w + j]
            dilated = max(dilated, v)
            eroded = min(eroded, v)
    lap[y * w + x] = dilated + eroded - 2.0 * centre
    return ready


@hpvm.leaf
def zero_crossings(ready: i32, lap: In[Ptr[f32]], lap_bytes: i64, zc: Out[Ptr[f32]],
                   zc_bytes: i64, w: i64, h: i64) -> i32:
    x = hpvm.instance_id(0)
    y = hpvm.instance_id(1)
    high = 0.0
    low = 1.0
    for i in range(max(y - 1, 0), min(y + 2, h)):
        for j in range(max(x - 1, 0), min(x + 2, w)):
            sign = 1.0 if lap[i * w + j] > 0.0 else 0.0
            high = max(high, sign)
            low = min(low, sign)
    zc[y * w + x] = high - low
    return ready


@hpvm.leaf
def gradient(ready: i32, smooth: In[Ptr[f32]], smooth_bytes: i64, grad: Out[Ptr[f32]],
             grad_bytes: i64, w: i64, h: i64) -> i32:
    x = hpvm.instance_id(0)
    y = hpvm.instance_id(1)
    xm, xp = max(x - 1, 0), min(x + 1, w - 1)
    ym, yp = max(y - 1, 0), min(y + 1, h - 1)
    gx = (smooth[ym * w + xp] + 2.0 * smooth[y * w + xp] + smooth[yp * w + xp]
          - smooth[ym * w + xm] - 2.0 * smooth[y * w + xm] - smooth[yp * w + xm])
    gy = (smooth[yp * w + xm] + 2.0 * smooth[yp * w + x] + smooth[yp * w + xp]
          - smooth[ym * w + xm] - 2.0 * smooth[ym * w + x] - smooth[ym * w + xp])
    grad[y * w + x] = hpvm.math.sqrt(gx * gx + gy * gy)
    return ready


@hpvm.leaf
def max_gradient(ready: i32, grad: In[Ptr[f32]], grad_bytes: i64, w: i64, h: i64) -> f32:
    best = 0.0
    for i in range(w * h):
        best = max(best, grad[i])
    return best


@hpvm.leaf
def reject_zero_crossings(ready: i32, max_grad: f32, zc: In[Ptr[f32]], zc_bytes: i64,
                          grad: In[Ptr[f32]], grad_bytes: i64, edges: Out[Ptr[f32]],
                          edges_bytes: i64, w: i64, theta: f32):
    x = hpvm.instance_id(0)
    y = hpvm.instance_id(1)
    at = y * w + x
    edges[at] = zc[at] if grad[at] > theta * max_grad else 0.0


@hpvm.graph
def pipeline(img: In[Ptr[f32]], img_bytes: i64, gauss: In[Ptr[f32]], gauss_bytes: i64,
             smooth: Out[Ptr[f32]], smooth_bytes: i64, lap: Out[Ptr[f32]], lap_bytes: i64,
             zc: Out[Ptr[f32]], zc_bytes: i64, grad: Out[Ptr[f32]], grad_bytes: i64,
             edges: Out[Ptr[f32]], edges_bytes: i64, w: i64, h: i64, theta: f32):
    s = hpvm.streaming
    grid = (w, h)
    gs = hpvm.node(gaussian_smoothing, grid=grid, img=s(img), img_bytes=img_bytes, gauss=gauss,
                   gauss_bytes=gauss_bytes, smooth=s(smooth), smooth_bytes=smooth_bytes, w=w, h=h)
    le = hpvm.node(laplacian, grid=grid, ready=s(hpvm.all_to_all(gs.out[0])), smooth=s(smooth),
                   smooth_bytes=smooth_bytes, lap=s(lap), lap_bytes=lap_bytes, w=w, h=h)
    cz = hpvm.node(zero_crossings, grid=grid, ready=s(hpvm.all_to_all(le.out[0])), lap=s(lap),
                   lap_bytes=lap_bytes, zc=s(zc), zc_bytes=zc_bytes, w=w, h=h)
    cg = hpvm.node(gradient, grid=grid, ready=s(hpvm.all_to_all(gs.out[1])), smooth=s(smooth),
                   smooth_bytes=smooth_bytes, grad=s(grad), grad_bytes=grad_bytes, w=w, h=h)
    mg = hpvm.node(max_gradient, ready=s(hpvm.all_to_all(cg.out[0])), grad=s(grad),
                   grad_bytes=grad_bytes, w=w, h=h)
    hpvm.node(reject_zero_crossings, grid=grid, ready=s(hpvm.all_to_all(cz.out[0])),
              max_grad=s(hpvm.all_to_all(mg.out[0])), zc=s(zc), zc_bytes=zc_bytes, grad=s(grad),
              grad_bytes=grad_bytes, edges=s(edges), edges_bytes=edges_bytes, w=w, theta=theta)


# ----------------------------------------------------------------------------------------------
# Host side


def gaussian_filter() -> np.ndarray:
    ax = np.arange(-RADIUS, RADIUS + 1, dtype=np.float64)
    g = np.exp(-(ax[:, None] ** 2 + ax[None, :] ** 2) / (2 * 1.5 ** 2))
    return (g / g.sum()).astype(np.float32)


def reference(img: np.ndarray, gauss: np.ndarray, theta: float) -> np.ndarray:
    """The same computation in NumPy, in the same order of float32 operations."""
    h, w = img.shape
    padded = np.pad(img, RADIUS, mode="edge")
    smooth = np.zeros_like(img)
    for i in range(WIDTH):
        for j in range(WIDTH):
            smooth = smooth + gauss[i, j] * padded[i:i + h, j:j + w]

    def window(a: np.ndarray, fill: float, op) -> np.ndarray:
        p = np.pad(a, 1, mode="constant", constant_values=fill)
        out = a.copy()
        for di in range(3):
            for dj in range(3):
                out = op(out, p[di:di + h, dj:dj + w])
        return out

    lap = window(smooth, -np.inf, np.maximum) + window(smooth, np.inf, np.minimum) - np.float32(2) * smooth
    sign = (lap > 0).astype(np.float32)
    zc = window(sign, 0.0, np.maximum) - window(sign, 1.0, np.minimum)
    e = np.pad(smooth, 1, mode="edge")
    c = np.float32(2)
    gx = (e[:-2, 2:] + c * e[1:-1, 2:] + e[2:, 2:] - e[:-2, :-2] - c * e[1:-1, :-2] - e[2:, :-2])
    gy = (e[2:, :-2] + c * e[2:, 1:-1] + e[2:, 2:] - e[:-2, :-2] - c * e[:-2, 1:-1] - e[:-2, 2:])
    grad = np.sqrt(gx * gx + gy * gy)
    return np.where(grad > np.float32(theta) * grad.max(), zc, np.float32(0))


def synthetic_frame(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Bright rectangles and a disc on a noisy background: plenty of edges."""
    img = rng.normal(0.1, 0.02, (h, w)).astype(np.float32)
    for _ in range(3):
        y0, x0 = rng.integers(0, max(h // 2, 1)), rng.integers(0, max(w // 2, 1))  # 1-pixel frames too
        img[y0:y0 + h // 3, x0:x0 + w // 3] += np.float32(rng.uniform(0.5, 1.0))
    yy, xx = np.mgrid[:h, :w]
    cy, cx, r = h * 0.6, w * 0.6, min(h, w) * 0.2
    img[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] += np.float32(0.7)
    return img


def frame_buffers(img: np.ndarray) -> list[np.ndarray]:
    return [img] + [np.zeros_like(img) for _ in range(5)]  # smooth, lap, zc, grad, edges


def frame_args(bufs: list[np.ndarray], gauss: np.ndarray, theta: float) -> list:
    img, smooth, lap, zc, grad, edges = bufs
    h, w = img.shape
    return [img, img.nbytes, gauss, gauss.nbytes, smooth, smooth.nbytes, lap, lap.nbytes, zc,
            zc.nbytes, grad, grad.nbytes, edges, edges.nbytes, w, h, theta]


def main(target: str | None = None, size: int = 96, frames: int = 6, theta: float = 0.25,
         stream: bool = True) -> None:
    rng = np.random.default_rng()
    gauss = gaussian_filter()
    h, w = size * 3 // 4, size
    inputs = [frame_buffers(synthetic_frame(rng, h, w)) for _ in range(frames)]
    with hpvm.runtime(target):
        if stream:
            handle = hpvm.launch(pipeline, stream=True)
            for bufs in inputs:
                hpvm.push(handle, *frame_args(bufs, gauss, theta))
            for _ in inputs:
                hpvm.pop(handle)
            hpvm.wait(handle)
        else:
            for bufs in inputs:
                hpvm.wait(hpvm.launch(pipeline, *frame_args(bufs, gauss, theta)))
        for bufs in inputs:
            hpvm.request_memory(bufs[5])
    for bufs in inputs:
        expected = reference(bufs[0], gauss, theta)
        np.testing.assert_allclose(bufs[5], expected, atol=1e-6)
    edge_pixels = sum(int(b[5].sum()) for b in inputs)
    print(f"edge detection: {frames} frames of {w}x{h}, {edge_pixels} edge pixels, all match NumPy")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=("cpu", "gpu", "python"), default=None)
    parser.add_argument("--size", type=int, default=96, help="frame width (height is 3/4 of it)")
    parser.add_argument("--frames", type=int, default=6)
    parser.add_argument("--no-stream", action="store_true", help="launch each frame with launch/wait")
    args = parser.parse_args()
    main(args.target, args.size, args.frames, stream=not args.no_stream)
