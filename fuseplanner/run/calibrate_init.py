"""Data-driven scale of generated conv weights whose BatchNormalization the exporter folded away.

A trained BN normalises its real input; a generated weight cannot know that input's scale from the
weight shapes alone (SiLU and squeeze-excitation gates shrink activations several-fold per block), so
`calibrate` measures it, as LSUV initialisation does: it runs the model once in float32 on a seeded
standard-normal input (the model's own input shapes), node by node in topological order through the
operator library (`fuseplanner.run.ops`, NumPy), and when it reaches a target conv it divides that
conv's weight by one scalar, the RMS over the whole output of (output - bias), so that part of its
output has RMS 1; the rescaled output feeds the rest of the run, so every later conv is measured on
its calibrated input. One scalar per layer (per-channel statistics of 1x1 squeeze-excitation tensors
are degenerate). The result depends only on the model's structure, its other weights and `seed`.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import numpy as np
import onnx

from fuseplanner.frontend.shapes import prepare
from fuseplanner.frontend.view import GraphView
from fuseplanner.run.constants import fold_constants

#: Salt of the calibration input's random stream (apart from every weight's stream).
_INPUT_SALT = zlib.crc32(b"fuseplanner calibration input")


def _inputs(view: GraphView, seed: int) -> dict[str, np.ndarray]:
    """A seeded standard-normal array per activation input (integer inputs: zeros)."""
    rng = np.random.default_rng([int(seed), _INPUT_SALT])
    out = {}
    for inp in view.model.graph.input:
        if view.is_const(inp.name):
            continue
        shape = tuple(int(d) for d in view.shape(inp.name))
        dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(view.elem_type(inp.name)))
        out[inp.name] = rng.standard_normal(shape).astype(dt) if dt.kind == "f" else np.zeros(shape, dt)
    return out


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 18)


def _run_node(view: GraphView, index: int, env: dict[str, np.ndarray], consts: Mapping, ops) -> list[np.ndarray]:
    node = view.nodes[index]
    outs = [o for o in node.output if o]
    shapes = {t: view.shape(t) for t in (*node.input, *outs) if t}
    dtypes = {t: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(view.elem_type(t))) for t in shapes}
    lib = ops.Node.from_onnx(node, shapes, dtypes, consts, _opset(view.model))
    kernel = ops.prepare(np, lib)
    results = [np.empty(s, d) for s, d in zip(lib.output_shapes, lib.output_dtypes, strict=True)]
    kernel([env.get(t) if t else None for t in node.input], results)
    return results


def _factor(y: np.ndarray, bias: np.ndarray | None) -> float:
    """RMS over the whole output of (y - bias): the scalar the conv's weight is divided by."""
    z = y.astype(np.float64)
    if bias is not None:
        z = z - bias.astype(np.float64).reshape((1, -1) + (1,) * (y.ndim - 2))
    r = float(np.sqrt(np.mean(z * z)))
    return r if np.isfinite(r) and r > 0 else 1.0


def calibrate(model: onnx.ModelProto, targets: Mapping[str, str], seed: int) -> dict[str, float]:
    """Weight name -> the scalar to divide it by, for `targets` (conv output tensor -> its weight
    initializer) of full ModelProto `model` (every initializer inline)."""
    from fuseplanner.run import ops

    view = GraphView(prepare(model))
    consts, _ = fold_constants(view)
    env: dict[str, np.ndarray] = dict(consts)
    env.update(_inputs(view, seed))
    factors: dict[str, float] = {}
    for index in view.compute:
        node = view.nodes[index]
        results = _run_node(view, index, env, consts, ops)
        out = node.output[0]
        if node.op_type == "Conv" and out in targets:
            bias = env.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            r = _factor(results[0], bias)
            factors[targets[out]] = r
            y = results[0]
            if bias is None:
                y /= r
            else:
                b = bias.reshape((1, -1) + (1,) * (y.ndim - 2))
                y[...] = (y - b) / r + b
        env.update(zip((o for o in node.output if o), results, strict=False))
    return factors

