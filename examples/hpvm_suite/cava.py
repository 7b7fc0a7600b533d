"""HPVM-CAVA, the Harvard camera pipeline, as HPVM's own port writes it (`hpvm-cava/src/main.c`).

A raw Bayer image (3 planes of bytes, CHW, only the sensor's colour of each pixel set) goes
through the five ISP stages, between a scale and a descale:

    scale (bytes -> [0, 1]) -> demosaic -> denoise (3x3 median) -> transform (white balance and
    colour map, TsTw) -> gamut map (3702 radial basis functions + an affine part) -> tone map
    (a 256-entry curve per channel) -> descale ([0, 1] -> bytes)

DFG (the same as the original's): the root holds seven single-instance wrapper nodes in that
order; each wrapper holds one leaf replicated over the image rows (one instance per row, 1-D).
Each stage's leaf returns the byte size of what it wrote, and that size travels on an all-to-all
edge to the next stage's input-size port (`__hpvm__edge(ScNode, DmNode, 1, 0, 1, 0)` and so on):
the edges are what order the stages. Pointers travel on binds, with the original's in/out
attributes (a pointer in both lists is `InOut`). The host launches the graph once and reads
back the result and the intermediate images.

Inputs (generated, from the suite's fixed seed; the HPVM repository's tulip image is not in the
mirror, and its camera model is read only when asked):
- the raw image: a scene of smooth colour gradients, discs and a checkerboard patch, mosaicked
  with the pattern the demosaic stage expects (even rows G R G R ..., odd rows B G B G ...) and
  stored as 3 planes of bytes; `read_raw_image(path)` reads the original's binary format instead
  (three int32: rows, cols, 3; then rows x cols x 3 bytes, HWC);
- the camera model, in the NikonD7000 model's shapes: TsTw, a 3x3 matrix (a colour matrix times a
  white-balance diagonal (2.0, 1.0, 1.6), transposed as the host does), 3702 control points
  uniform in the unit cube with weights of N(0, 1) * 0.05 / 3702 each, a 4x3 affine part (no bias,
  a near-identity 3x3) and a tone curve of gamma 1/2.2 per channel;
  `read_camera_model(dir, wb_index=6)` reads a camera model directory in the original's text
  format (`raw2jpg_transform.txt`, `raw2jpg_ctrlPoints.txt`, `raw2jpg_coefs.txt`,
  `raw2jpg_respFcns.txt`), e.g. HPVM's `cam_models/NikonD7000/`.
`standard` is 480 x 640 pixels, `small` 6 x 8 (the python target runs the 3702-point loop of
every pixel as Python).

Check: no Parboil tool exists for CAVA. The float stages (demosaic, denoise, transform, gamut)
must match NumPy within 1e-4 relative or 1e-4 * the stage's largest value (the gamut sums run in
another order in NumPy); the integer stages are checked exactly against the stage's rule applied
to the port's own input to it (tone map and descale on the port's gamut output).

Differences from the original:
- descale's leaf loops over all rows in every one of its row_size instances in the original (each
  instance writes the whole image); here each instance writes its own row.
- denoise sorts a 9-element local array in C; hpvm-py leaves have no per-instance arrays, so the
  port takes the same median with a 19-exchange min/max network on scalars.
- gamut map's `l2_dist` is `in` and `out` in the leaf's attributes but `in` only in its wrapper's,
  and the leaf never touches it: it is `In` here (hpvm-py refuses an `Out` child of an `In`
  parent). The root's `input_scaled` and `result_scaled` are `in` only in the original although
  the scale and tone-map leaves write them: `InOut` here for the same reason.
- tone map converts a float to `uint8_t` (undefined in C beyond 255); `hpvm.u8()` saturates.
  C then promotes the byte to `int` for `x * CHAN_SIZE`; hpvm-py's literals take the other
  operand's type, so the port writes `int(x) * CHAN_SIZE` (`x * 3` would wrap in u8).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64, u8

try:
    from ._common import ONCE, Passes, SuiteInputError, rng_for
except ImportError:  # loaded as a file (`hpvmc check examples/hpvm_suite/cava.py`)
    import sys
    from pathlib import Path as _Path

    sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    from hpvm_suite._common import ONCE, Passes, SuiteInputError, rng_for

CHAN_SIZE = 3
NUM_CTRL_PTS = 3702

SIZES = {"small": {"rows": 6, "cols": 8}, "standard": {"rows": 480, "cols": 640}}


@hpvm.leaf
def scale_fxp(input: In[Ptr[u8]], bytes_input: i64, output: InOut[Ptr[f32]], bytes_output: i64,
              row_size: i64, col_size: i64) -> i64:
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    for chan in range(CHAN_SIZE):
        for col in range(col_size):
            index = (chan * row_size + row) * col_size + col
            output[index] = float(input[index]) * 1.0 / 255.0
    return bytes_output


@hpvm.leaf
def descale_fxp(input: In[Ptr[f32]], bytes_input: i64, output: InOut[Ptr[u8]], bytes_result: i64,
                row_size: i64, col_size: i64):
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    for chan in range(CHAN_SIZE):
        for col in range(col_size):
            index = (chan * row_size + row) * col_size + col
            output[index] = min(max(input[index] * 255.0, 0.0), 255.0)


@hpvm.leaf
def demosaic_fxp(input: In[Ptr[f32]], bytes_input: i64, result: InOut[Ptr[f32]],
                 bytes_result: i64, row_size: i64, col_size: i64) -> i64:
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    for col in range(1, col_size - 1):
        i0 = (0 * row_size + row) * col_size + col
        i1 = (1 * row_size + row) * col_size + col
        i2 = (2 * row_size + row) * col_size + col
        if row % 2 == 0 and col % 2 == 0:  # green pixel on a red row
            result[i0] = (input[i0 - 1] + input[i0 + 1]) / 2.0
            result[i1] = input[i1] * 2.0
            result[i2] = (input[i2 - col_size] + input[i2 + col_size]) / 2.0
        elif row % 2 == 0 and col % 2 == 1:  # red pixel
            result[i0] = input[i0]
            result[i1] = (input[i1 - col_size] + input[i1 + col_size] + input[i1 - 1]
                          + input[i1 + 1]) / 2.0
            result[i2] = (input[i2 - col_size - 1] + input[i2 - col_size + 1]
                          + input[i2 + col_size - 1] + input[i2 + col_size + 1]) / 4.0
        elif row % 2 == 1 and col % 2 == 0:  # blue pixel
            result[i0] = (input[i0 - col_size - 1] + input[i0 + col_size - 1]
                          + input[i0 - col_size + 1] + input[i0 + col_size + 1]) / 4.0
            result[i1] = (input[i1 - col_size] + input[i1 + col_size] + input[i1 - 1]
                          + input[i1 + 1]) / 2.0
            result[i2] = input[i2]
        else:  # green pixel on a blue row
            result[i0] = (input[i0 - col_size] + input[i0 + col_size]) / 2.0
            result[i1] = input[i1] * 2.0
            result[i2] = (input[i2 - 1] + input[i2 + 1]) / 2.0
    return bytes_result


@hpvm.leaf
def denoise_fxp(input: In[Ptr[f32]], bytes_input: i64, result: InOut[Ptr[f32]],
                bytes_result: i64, row_size: i64, col_size: i64) -> i64:
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    for chan in range(CHAN_SIZE):
        for col in range(col_size):
            at = (chan * row_size + row) * col_size + col
            if row >= 1 and row < row_size - 1 and col >= 1 and col < col_size - 1:
                p0 = input[at - col_size - 1]
                p1 = input[at - col_size]
                p2 = input[at - col_size + 1]
                p3 = input[at - 1]
                p4 = input[at]
                p5 = input[at + 1]
                p6 = input[at + col_size - 1]
                p7 = input[at + col_size]
                p8 = input[at + col_size + 1]
                # the median of nine: 19 compare-exchanges (Paeth / Devillard)
                p1, p2 = min(p1, p2), max(p1, p2)
                p4, p5 = min(p4, p5), max(p4, p5)
                p7, p8 = min(p7, p8), max(p7, p8)
                p0, p1 = min(p0, p1), max(p0, p1)
                p3, p4 = min(p3, p4), max(p3, p4)
                p6, p7 = min(p6, p7), max(p6, p7)
                p1, p2 = min(p1, p2), max(p1, p2)
                p4, p5 = min(p4, p5), max(p4, p5)
                p7, p8 = min(p7, p8), max(p7, p8)
                p3 = max(p0, p3)
                p5 = min(p5, p8)
                p4, p7 = min(p4, p7), max(p4, p7)
                p6 = max(p3, p6)
                p4 = max(p1, p4)
                p2 = min(p2, p5)
                p4 = min(p4, p7)
                p4, p2 = min(p4, p2), max(p4, p2)
                p4 = max(p6, p4)
                p4 = min(p4, p2)
                result[at] = p4
            else:
                result[at] = input[at]
    return bytes_result


@hpvm.leaf
def transform_fxp(input: In[Ptr[f32]], bytes_input: i64, result: InOut[Ptr[f32]],
                  bytes_result: i64, ts_tw_tran: In[Ptr[f32]], bytes_ts_tw: i64, row_size: i64,
                  col_size: i64) -> i64:
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    for chan in range(CHAN_SIZE):
        for col in range(col_size):
            index = (chan * row_size + row) * col_size + col
            i0 = (0 * row_size + row) * col_size + col
            i1 = (1 * row_size + row) * col_size + col
            i2 = (2 * row_size + row) * col_size + col
            result[index] = max(input[i0] * ts_tw_tran[0 * CHAN_SIZE + chan]
                                + input[i1] * ts_tw_tran[1 * CHAN_SIZE + chan]
                                + input[i2] * ts_tw_tran[2 * CHAN_SIZE + chan], 0.0)
    return bytes_result


@hpvm.leaf
def gamut_map_fxp(input: In[Ptr[f32]], bytes_input: i64, result: InOut[Ptr[f32]],
                  bytes_result: i64, ctrl_pts: In[Ptr[f32]], bytes_ctrl_pts: i64,
                  weights: In[Ptr[f32]], bytes_weights: i64, coefs: In[Ptr[f32]],
                  bytes_coefs: i64, l2_dist: In[Ptr[f32]], bytes_l2_dist: i64, row_size: i64,
                  col_size: i64) -> i64:
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    for col in range(col_size):
        i0 = (0 * row_size + row) * col_size + col
        i1 = (1 * row_size + row) * col_size + col
        i2 = (2 * row_size + row) * col_size + col
        chan_val_0: f32 = 0.0
        chan_val_1: f32 = 0.0
        chan_val_2: f32 = 0.0
        for cp in range(NUM_CTRL_PTS):
            v0 = input[i0] - ctrl_pts[cp * 3 + 0]
            v1 = input[i1] - ctrl_pts[cp * 3 + 1]
            v2 = input[i2] - ctrl_pts[cp * 3 + 2]
            dist = hpvm.math.sqrt(v0 * v0 + v1 * v1 + v2 * v2)
            chan_val_0 += dist * weights[cp * CHAN_SIZE + 0]
            chan_val_1 += dist * weights[cp * CHAN_SIZE + 1]
            chan_val_2 += dist * weights[cp * CHAN_SIZE + 2]
        chan_val_0 += (coefs[0 * CHAN_SIZE + 0] + coefs[1 * CHAN_SIZE + 0] * input[i0]
                       + coefs[2 * CHAN_SIZE + 0] * input[i1] + coefs[3 * CHAN_SIZE + 0] * input[i2])
        chan_val_1 += (coefs[0 * CHAN_SIZE + 1] + coefs[1 * CHAN_SIZE + 1] * input[i0]
                       + coefs[2 * CHAN_SIZE + 1] * input[i1] + coefs[3 * CHAN_SIZE + 1] * input[i2])
        chan_val_2 += (coefs[0 * CHAN_SIZE + 2] + coefs[1 * CHAN_SIZE + 2] * input[i0]
                       + coefs[2 * CHAN_SIZE + 2] * input[i1] + coefs[3 * CHAN_SIZE + 2] * input[i2])
        result[i0] = max(chan_val_0, 0.0)
        result[i1] = max(chan_val_1, 0.0)
        result[i2] = max(chan_val_2, 0.0)
    return bytes_result


@hpvm.leaf
def tone_map_fxp(input: In[Ptr[f32]], bytes_input: i64, result: InOut[Ptr[f32]],
                 bytes_result: i64, tone_map: In[Ptr[f32]], bytes_tone_map: i64, row_size: i64,
                 col_size: i64) -> i64:
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    for chan in range(CHAN_SIZE):
        for col in range(col_size):
            index = (chan * row_size + row) * col_size + col
            x = hpvm.u8(input[index] * 255.0)
            # C promotes the uint8_t to int before `x * CHAN_SIZE`; hpvm-py keeps u8 (and wraps)
            result[index] = tone_map[int(x) * CHAN_SIZE + chan]
    return bytes_result


# the wrappers: one single-instance internal node per leaf, the leaf replicated over the rows


@hpvm.graph
def scale_fxp_wrapper(input: In[Ptr[u8]], bytes_input: i64, result: InOut[Ptr[f32]],
                      bytes_result: i64, row_size: i64, col_size: i64) -> i64:
    n = hpvm.node(scale_fxp, grid=row_size, input=input, bytes_input=bytes_input, output=result,
                  bytes_output=bytes_result, row_size=row_size, col_size=col_size)
    return n.out[0]


@hpvm.graph
def descale_fxp_wrapper(input: In[Ptr[f32]], bytes_input: i64, result: InOut[Ptr[u8]],
                        bytes_result: i64, row_size: i64, col_size: i64):
    hpvm.node(descale_fxp, grid=row_size, input=input, bytes_input=bytes_input, output=result,
              bytes_result=bytes_result, row_size=row_size, col_size=col_size)


@hpvm.graph
def demosaic_fxp_wrapper(input: In[Ptr[f32]], bytes_input: i64, result: InOut[Ptr[f32]],
                         bytes_result: i64, row_size: i64, col_size: i64) -> i64:
    n = hpvm.node(demosaic_fxp, grid=row_size, input=input, bytes_input=bytes_input,
                  result=result, bytes_result=bytes_result, row_size=row_size, col_size=col_size)
    return n.out[0]


@hpvm.graph
def denoise_fxp_wrapper(input: In[Ptr[f32]], bytes_input: i64, result: InOut[Ptr[f32]],
                        bytes_result: i64, row_size: i64, col_size: i64) -> i64:
    n = hpvm.node(denoise_fxp, grid=row_size, input=input, bytes_input=bytes_input,
                  result=result, bytes_result=bytes_result, row_size=row_size, col_size=col_size)
    return n.out[0]


@hpvm.graph
def transform_fxp_wrapper(input: In[Ptr[f32]], bytes_input: i64, result: InOut[Ptr[f32]],
                          bytes_result: i64, ts_tw_tran: In[Ptr[f32]], bytes_ts_tw: i64,
                          row_size: i64, col_size: i64) -> i64:
    n = hpvm.node(transform_fxp, grid=row_size, input=input, bytes_input=bytes_input,
                  result=result, bytes_result=bytes_result, ts_tw_tran=ts_tw_tran,
                  bytes_ts_tw=bytes_ts_tw, row_size=row_size, col_size=col_size)
    return n.out[0]


@hpvm.graph
def gamut_fxp_wrapper(input: In[Ptr[f32]], bytes_input: i64, result: InOut[Ptr[f32]],
                      bytes_result: i64, ctrl_pts: In[Ptr[f32]], bytes_ctrl_pts: i64,
                      weights: In[Ptr[f32]], bytes_weights: i64, coefs: In[Ptr[f32]],
                      bytes_coefs: i64, l2_dist: In[Ptr[f32]], bytes_l2_dist: i64, row_size: i64,
                      col_size: i64) -> i64:
    n = hpvm.node(gamut_map_fxp, grid=row_size, input=input, bytes_input=bytes_input,
                  result=result, bytes_result=bytes_result, ctrl_pts=ctrl_pts,
                  bytes_ctrl_pts=bytes_ctrl_pts, weights=weights, bytes_weights=bytes_weights,
                  coefs=coefs, bytes_coefs=bytes_coefs, l2_dist=l2_dist,
                  bytes_l2_dist=bytes_l2_dist, row_size=row_size, col_size=col_size)
    return n.out[0]


@hpvm.graph
def tone_map_fxp_wrapper(input: In[Ptr[f32]], bytes_input: i64, result: InOut[Ptr[f32]],
                         bytes_result: i64, tone_map: In[Ptr[f32]], bytes_tone_map: i64,
                         row_size: i64, col_size: i64) -> i64:
    n = hpvm.node(tone_map_fxp, grid=row_size, input=input, bytes_input=bytes_input,
                  result=result, bytes_result=bytes_result, tone_map=tone_map,
                  bytes_tone_map=bytes_tone_map, row_size=row_size, col_size=col_size)
    return n.out[0]


@hpvm.graph
def cam_pipe_root(input: In[Ptr[u8]], bytes_input: i64, result: InOut[Ptr[u8]], bytes_result: i64,
                  input_scaled: InOut[Ptr[f32]], bytes_input_scaled: i64,
                  result_scaled: InOut[Ptr[f32]], bytes_result_scaled: i64,
                  demosaic_out: InOut[Ptr[f32]], bytes_demosaic_out: i64,
                  denoise_out: InOut[Ptr[f32]], bytes_denoise_out: i64,
                  transform_out: InOut[Ptr[f32]], bytes_transform_out: i64,
                  gamut_out: InOut[Ptr[f32]], bytes_gamut_out: i64,
                  ts_tw: In[Ptr[f32]], bytes_ts_tw: i64, ctrl_pts: In[Ptr[f32]], bytes_ctrl_pts: i64,
                  weights: In[Ptr[f32]], bytes_weights: i64, coefs: In[Ptr[f32]], bytes_coefs: i64,
                  l2_dist: In[Ptr[f32]], bytes_l2_dist: i64, tone_map: In[Ptr[f32]],
                  bytes_tone_map: i64, row_size: i64, col_size: i64):
    a2a = hpvm.all_to_all
    sc = hpvm.node(scale_fxp_wrapper, input=input, bytes_input=bytes_input, result=input_scaled,
                   bytes_result=bytes_input_scaled, row_size=row_size, col_size=col_size)
    dm = hpvm.node(demosaic_fxp_wrapper, input=input_scaled, bytes_input=a2a(sc.out[0]),
                   result=demosaic_out, bytes_result=bytes_demosaic_out, row_size=row_size,
                   col_size=col_size)
    dn = hpvm.node(denoise_fxp_wrapper, input=demosaic_out, bytes_input=a2a(dm.out[0]),
                   result=denoise_out, bytes_result=bytes_denoise_out, row_size=row_size,
                   col_size=col_size)
    # the original binds bytes_result_scaled here (the same size as bytes_transform_out)
    tr = hpvm.node(transform_fxp_wrapper, input=denoise_out, bytes_input=a2a(dn.out[0]),
                   result=transform_out, bytes_result=bytes_result_scaled, ts_tw_tran=ts_tw,
                   bytes_ts_tw=bytes_ts_tw, row_size=row_size, col_size=col_size)
    gm = hpvm.node(gamut_fxp_wrapper, input=transform_out, bytes_input=a2a(tr.out[0]),
                   result=gamut_out, bytes_result=bytes_gamut_out, ctrl_pts=ctrl_pts,
                   bytes_ctrl_pts=bytes_ctrl_pts, weights=weights, bytes_weights=bytes_weights,
                   coefs=coefs, bytes_coefs=bytes_coefs, l2_dist=l2_dist,
                   bytes_l2_dist=bytes_l2_dist, row_size=row_size, col_size=col_size)
    tn = hpvm.node(tone_map_fxp_wrapper, input=gamut_out, bytes_input=a2a(gm.out[0]),
                   result=result_scaled, bytes_result=bytes_result_scaled, tone_map=tone_map,
                   bytes_tone_map=bytes_tone_map, row_size=row_size, col_size=col_size)
    hpvm.node(descale_fxp_wrapper, input=result_scaled, bytes_input=a2a(tn.out[0]), result=result,
              bytes_result=bytes_result, row_size=row_size, col_size=col_size)


root = cam_pipe_root


# ----------------------------------------------------------------------------------------------
# Inputs


def generated_scene(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """An RGB scene in [0, 1], HWC: gradients, a few discs and a fine checkerboard patch."""
    y, x = np.mgrid[:rows, :cols] / np.array([max(rows - 1, 1), max(cols - 1, 1)])[:, None, None]
    img = np.stack([0.2 + 0.6 * x, 0.3 + 0.4 * y, 0.7 - 0.5 * x * y], -1)
    for _ in range(5):
        cy, cx, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.2)
        img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.uniform(0.05, 0.95, 3)
    checker = ((np.arange(rows)[:, None] // 4 + np.arange(cols)[None, :] // 4) % 2).astype(bool)
    patch = (y > 0.6) & (x > 0.6) & checker
    img[patch] = 0.9
    img += rng.normal(0, 0.01, img.shape)
    return np.clip(img, 0, 1)


def mosaic(scene: np.ndarray) -> np.ndarray:
    """The raw image: per pixel only the sensor's colour (G R / B G), as 3 byte planes, HWC."""
    rows, cols, _ = scene.shape
    raw = np.zeros((rows, cols, 3), np.uint8)
    r, c = np.mgrid[:rows, :cols]
    channel = np.where(r % 2 == 0, np.where(c % 2 == 0, 1, 0), np.where(c % 2 == 0, 2, 1))
    # the sensor sees about half the green the demosaic doubles back
    value = scene[r, c, channel] * np.where(channel == 1, 0.5, 1.0)
    raw[r, c, channel] = np.round(value * 255).astype(np.uint8)
    return raw


def generated_camera_model(rng: np.random.Generator) -> dict:
    colour = np.array([[1.55, -0.45, -0.10], [-0.20, 1.40, -0.20], [0.05, -0.50, 1.45]])
    ts_tw = (colour @ np.diag([2.0, 1.0, 1.6])).astype(np.float32)
    ctrl_pts = rng.random((NUM_CTRL_PTS, 3)).astype(np.float32)
    weights = (rng.normal(0, 1, (NUM_CTRL_PTS, 3)) * 0.05 / NUM_CTRL_PTS).astype(np.float32)
    coefs = np.vstack([np.zeros(3), np.eye(3) * 0.95 + 0.02]).astype(np.float32)
    tone_map = np.repeat((np.arange(256) / 255.0) ** (1 / 2.2), 3).reshape(256, 3).astype(np.float32)
    return {"ts_tw": ts_tw, "ctrl_pts": ctrl_pts, "weights": weights, "coefs": coefs,
            "tone_map": tone_map}


def _table(path: Path, first: int, count: int, what: str) -> np.ndarray:
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteInputError(f"{path}: cannot read {what}: {exc}") from None
    if len(lines) < first + count:
        raise SuiteInputError(f"{path}: truncated: expected {what} on lines {first + 1} to "
                              f"{first + count}, the file has {len(lines)} lines")
    try:
        table = np.array([[float(v) for v in ln.split()[:3]] for ln in lines[first:first + count]])
        if table.shape != (count, 3):
            raise ValueError
    except ValueError:
        raise SuiteInputError(f"{path}: expected three numbers a line for {what} (lines "
                              f"{first + 1} to {first + count})") from None
    return table.astype(np.float32)


def read_camera_model(directory: str | Path, wb_index: int = 6) -> dict:
    """A camera model directory in the original's text format (see the module docstring)."""
    d = Path(directory)
    ts_tw = _table(d / "raw2jpg_transform.txt", 5 + 5 * (wb_index - 1), 3,
                   f"white balance {wb_index}'s 3x3 transform")
    return {"ts_tw": ts_tw,
            "ctrl_pts": _table(d / "raw2jpg_ctrlPoints.txt", 1, NUM_CTRL_PTS, "the control points"),
            "weights": _table(d / "raw2jpg_coefs.txt", 1, NUM_CTRL_PTS, "the control point weights"),
            "coefs": _table(d / "raw2jpg_coefs.txt", 1 + NUM_CTRL_PTS, 4, "the affine coefficients"),
            "tone_map": _table(d / "raw2jpg_respFcns.txt", 1, 256, "the tone curves")}


def read_raw_image(path: str | Path) -> np.ndarray:
    """The original's raw image file: int32 rows, cols, channels (3), then HWC bytes."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SuiteInputError(f"{path}: cannot read a raw image: {exc.strerror or exc}") from None
    if len(data) < 12:
        raise SuiteInputError(f"{path}: truncated: expected a 12-byte header (int32 rows, cols, "
                              f"channels), found {len(data)} bytes")
    rows, cols, chans = (int(v) for v in np.frombuffer(data[:12], np.int32))
    if chans != CHAN_SIZE or rows <= 0 or cols <= 0:
        raise SuiteInputError(f"{path}: expected a header of rows, cols and {CHAN_SIZE} channels, "
                              f"found {rows}, {cols}, {chans}")
    if len(data) != 12 + rows * cols * chans:
        raise SuiteInputError(f"{path}: expected {rows} x {cols} x {chans} = {rows * cols * chans} "
                              f"bytes of pixels after the header, found {len(data) - 12}")
    return np.frombuffer(data[12:], np.uint8).reshape(rows, cols, chans).copy()


def make_inputs(rows: int, cols: int, raw: str | None = None, cam_model: str | None = None) -> dict:
    rng = rng_for("cava")
    image = mosaic(generated_scene(rows, cols, rng)) if raw is None else read_raw_image(raw)
    model = generated_camera_model(rng) if cam_model is None else read_camera_model(cam_model)
    # the host transposes TsTw before the launch
    model["ts_tw"] = np.ascontiguousarray(model["ts_tw"].T)
    return {"rows": image.shape[0], "cols": image.shape[1], "raw_hwc": image, **model}


def run(inputs: dict, target: str | None, passes: Passes | None = None) -> dict:
    rows, cols = inputs["rows"], inputs["cols"]
    chw = np.ascontiguousarray(inputs["raw_hwc"].transpose(2, 0, 1)).reshape(-1)
    result = np.zeros_like(chw)
    planes = {k: np.zeros(chw.size, np.float32) for k in
              ("input_scaled", "result_scaled", "demosaic_out", "denoise_out", "transform_out",
               "gamut_out")}
    l2_dist = np.zeros(NUM_CTRL_PTS, np.float32)
    m = {k: np.ascontiguousarray(inputs[k]).reshape(-1) for k in
         ("ts_tw", "ctrl_pts", "weights", "coefs", "tone_map")}
    p = planes
    with hpvm.runtime(target):
        for buf in (chw, result, l2_dist, *planes.values(), *m.values()):  # llvm_hpvm_track_mem
            hpvm.track_memory(buf)
        for _ in passes or ONCE:
            hpvm.wait(hpvm.launch(
                root, chw, chw.nbytes, result, result.nbytes, p["input_scaled"],
                p["input_scaled"].nbytes, p["result_scaled"], p["result_scaled"].nbytes,
                p["demosaic_out"], p["demosaic_out"].nbytes, p["denoise_out"],
                p["denoise_out"].nbytes, p["transform_out"], p["transform_out"].nbytes,
                p["gamut_out"], p["gamut_out"].nbytes, m["ts_tw"], m["ts_tw"].nbytes,
                m["ctrl_pts"], m["ctrl_pts"].nbytes, m["weights"], m["weights"].nbytes,
                m["coefs"], m["coefs"].nbytes, l2_dist, l2_dist.nbytes, m["tone_map"],
                m["tone_map"].nbytes, rows, cols))
        for buf in (result, *planes.values()):
            hpvm.request_memory(buf)
        for buf in (chw, result, l2_dist, *planes.values(), *m.values()):
            hpvm.untrack_memory(buf)
    out = {k: v.reshape(3, rows, cols) for k, v in planes.items()}
    out["result"] = result.reshape(3, rows, cols)
    out["tone_map_table"] = inputs["tone_map"]
    return out


# ----------------------------------------------------------------------------------------------
# Reference


def ref_demosaic(inp: np.ndarray) -> np.ndarray:
    """The demosaic leaf on flat CHW data, including its cross-plane reads at the top and bottom."""
    _, rows, cols = inp.shape
    flat = inp.reshape(-1)
    res = np.zeros_like(flat)
    r, c = np.mgrid[:rows, 1:cols - 1]
    r, c = r.ravel(), c.ravel()
    i0, i1, i2 = r * cols + c, (rows + r) * cols + c, (2 * rows + r) * cols + c
    w, f = cols, flat
    two, four = np.float32(2), np.float32(4)
    for cls in range(4):
        sel = ((r % 2) * 2 + (c % 2)) == cls
        a0, a1, a2 = i0[sel], i1[sel], i2[sel]
        if cls == 0:
            res[a0] = (f[a0 - 1] + f[a0 + 1]) / two
            res[a1] = f[a1] * two
            res[a2] = (f[a2 - w] + f[a2 + w]) / two
        elif cls == 1:
            res[a0] = f[a0]
            res[a1] = (f[a1 - w] + f[a1 + w] + f[a1 - 1] + f[a1 + 1]) / two
            res[a2] = (f[a2 - w - 1] + f[a2 - w + 1] + f[a2 + w - 1] + f[a2 + w + 1]) / four
        elif cls == 2:
            res[a0] = (f[a0 - w - 1] + f[a0 + w - 1] + f[a0 - w + 1] + f[a0 + w + 1]) / four
            res[a1] = (f[a1 - w] + f[a1 + w] + f[a1 - 1] + f[a1 + 1]) / two
            res[a2] = f[a2]
        else:
            res[a0] = (f[a0 - w] + f[a0 + w]) / two
            res[a1] = f[a1] * two
            res[a2] = (f[a2 - 1] + f[a2 + 1]) / two
    return res.reshape(inp.shape)


def ref_denoise(inp: np.ndarray) -> np.ndarray:
    out = inp.copy()
    _, rows, cols = inp.shape
    win = np.stack([inp[:, 1 + di:rows - 1 + di, 1 + dj:cols - 1 + dj]
                    for di in (-1, 0, 1) for dj in (-1, 0, 1)])
    out[:, 1:-1, 1:-1] = np.sort(win, axis=0)[4]
    return out


def ref_transform(inp: np.ndarray, ts_tw_tran: np.ndarray) -> np.ndarray:
    t = ts_tw_tran.reshape(3, 3)
    return np.stack([np.maximum(inp[0] * t[0, c] + inp[1] * t[1, c] + inp[2] * t[2, c],
                                np.float32(0)) for c in range(3)])


def ref_gamut(inp: np.ndarray, ctrl_pts, weights, coefs) -> np.ndarray:
    px = inp.reshape(3, -1).T
    out = np.empty_like(px)
    for s in range(0, len(px), 2048):
        p = px[s:s + 2048]
        d = p[:, None, :] - ctrl_pts[None, :, :]
        dist = np.sqrt(d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1] + d[..., 2] * d[..., 2])
        acc = dist.astype(np.float64) @ weights.astype(np.float64)
        aff = coefs[0] + coefs[1] * p[:, :1] + coefs[2] * p[:, 1:2] + coefs[3] * p[:, 2:3]
        out[s:s + 2048] = np.maximum(acc + aff, 0)
    return out.T.reshape(inp.shape)


def ref_tone_map(inp: np.ndarray, tone_map: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        x = np.clip(np.nan_to_num(np.trunc(inp * np.float32(255)), nan=0), 0, 255).astype(np.int64)
    return tone_map[x, np.arange(3)[:, None, None]]


def ref_descale(inp: np.ndarray) -> np.ndarray:
    return np.trunc(np.minimum(np.maximum(inp * np.float32(255), 0), 255)).astype(np.uint8)


def reference(inputs: dict) -> dict:
    chw = inputs["raw_hwc"].transpose(2, 0, 1)
    scaled = (chw.astype(np.float64) * 1.0 / 255).astype(np.float32)
    dm = ref_demosaic(scaled)
    dn = ref_denoise(dm)
    tr = ref_transform(dn, inputs["ts_tw"])
    gm = ref_gamut(tr, inputs["ctrl_pts"], inputs["weights"], inputs["coefs"])
    tn = ref_tone_map(gm, inputs["tone_map"])
    return {"input_scaled": scaled, "demosaic_out": dm, "denoise_out": dn, "transform_out": tr,
            "gamut_out": gm, "result_scaled": tn, "result": ref_descale(tn)}


def check(outputs: dict, expected: dict) -> str | None:
    for stage in ("input_scaled", "demosaic_out", "denoise_out", "transform_out", "gamut_out"):
        out, ref = outputs[stage], expected[stage]
        tol = 1e-4 * max(float(np.abs(ref).max(initial=0)), 1e-30)
        with np.errstate(invalid="ignore"):  # inf - inf: NaN, matched below
            bad = ~((np.abs(out - ref) <= tol) | (np.abs(out - ref) <= 1e-4 * np.abs(ref))
                    | (np.isnan(out) & np.isnan(ref)))  # as parboil_close: a NaN matches a NaN
        if bad.any():
            at = np.unravel_index(np.flatnonzero(bad)[0], out.shape)
            return (f"{stage}: {int(bad.sum())} of {out.size} values differ; first at {at}: "
                    f"{out[at]!r}, expected {ref[at]!r}")
    # the integer stages, exactly, from the port's own gamut output
    tn = ref_tone_map(outputs["gamut_out"], outputs["tone_map_table"])
    if not np.array_equal(outputs["result_scaled"], tn):
        return f"result_scaled: {int((outputs['result_scaled'] != tn).sum())} values differ from the tone map of gamut_out"
    ds = ref_descale(outputs["result_scaled"])
    if not np.array_equal(outputs["result"], ds):
        return f"result: {int((outputs['result'] != ds).sum())} bytes differ from the descale of result_scaled"
    return None


def torch_program(inputs: dict, device: str):
    import torch

    rows, cols = inputs["rows"], inputs["cols"]
    chw = torch.from_numpy(np.ascontiguousarray(inputs["raw_hwc"].transpose(2, 0, 1))).to(device)
    t = {k: torch.from_numpy(np.ascontiguousarray(inputs[k])).to(device) for k in
         ("ts_tw", "ctrl_pts", "weights", "coefs", "tone_map")}

    def pipe(raw, ts_tw, ctrl_pts, weights, coefs, tone_map):
        x = raw.to(torch.float32) / 255.0
        # demosaic (interior rows and columns; the edges are a small share of the work)
        f = torch.nn.functional.pad(x, (1, 1, 1, 1))
        up, down = f[:, :-2, 1:-1], f[:, 2:, 1:-1]
        left, right = f[:, 1:-1, :-2], f[:, 1:-1, 2:]
        diag = (f[:, :-2, :-2] + f[:, :-2, 2:] + f[:, 2:, :-2] + f[:, 2:, 2:]) / 4
        cross = (up + down + left + right) / 2
        r_par = (torch.arange(rows, device=raw.device) % 2)[:, None]
        c_par = (torch.arange(cols, device=raw.device) % 2)[None, :]
        r_even, c_even = r_par == 0, c_par == 0
        red = torch.where(r_even & c_even, (left[0] + right[0]) / 2,
                          torch.where(r_even, x[0], torch.where(c_even, diag[0], (up[0] + down[0]) / 2)))
        green = torch.where(r_par == c_par, x[1] * 2, cross[1])
        blue = torch.where(r_even & c_even, (up[2] + down[2]) / 2,
                           torch.where(r_even, diag[2], torch.where(c_even, x[2], (left[2] + right[2]) / 2)))
        dm = torch.stack([red, green, blue])
        # denoise: 3x3 median
        p = torch.nn.functional.pad(dm, (1, 1, 1, 1), mode="replicate")
        win = torch.stack([p[:, i:i + rows, j:j + cols] for i in range(3) for j in range(3)])
        dn = win.median(dim=0).values
        tr = torch.clamp(torch.einsum("chw,cd->dhw", dn, ts_tw), min=0)
        px = tr.reshape(3, -1).T
        dist = torch.cdist(px, ctrl_pts)
        gm = torch.clamp(dist @ weights + coefs[0] + px @ coefs[1:], min=0).T.reshape(3, rows, cols)
        idx = torch.clamp(gm * 255, 0, 255).to(torch.int64)
        tn = torch.gather(tone_map.T, 1, idx.reshape(3, -1)).reshape(3, rows, cols)
        return torch.clamp(tn * 255, 0, 255).to(torch.uint8)

    return pipe, lambda kernel: kernel(chw, t["ts_tw"], t["ctrl_pts"], t["weights"], t["coefs"],
                                       t["tone_map"])


def numba_program(inputs: dict, cuda: bool = False):
    return None  # Parboil has no OpenMP version of CAVA
