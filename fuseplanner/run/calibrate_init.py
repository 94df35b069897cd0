"""Data-driven scale of generated conv weights whose BatchNormalization the exporter folded away.

A trained BN normalises its real input; a generated weight cannot know that input's scale from the
weight shapes alone (SiLU and squeeze-excitation gates shrink activations several-fold per block), so
`calibrate` measures it, as LSUV initialisation does: it runs the model once in float32 on a seeded
standard-normal input (the model's own input shapes, a dynamic batch dim as 1; where other
dims are dynamic, the shapes the model is compiled at), node by node in topological order through the
operator library (`fuseplanner.run.ops`, NumPy), and when it reaches a target conv it divides that
conv's weight by one scalar, the RMS over the whole output of (output - bias), so that part of its
output has RMS 1; the rescaled output feeds the rest of the run, so every later conv is measured on
its calibrated input. One scalar per layer (per-channel statistics of 1x1 squeeze-excitation tensors
are degenerate). The result depends only on the model's structure, its other weights and `seed`;
it is cached per (model bytes, seed), so compiling a model again does not run it again.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Mapping

import numpy as np
import onnx

from fuseplanner.core.errors import ModelError
from fuseplanner.frontend.shapes import default_opset, prepare
from fuseplanner.frontend.view import GraphView
from fuseplanner.run.constants import fold_constants

#: Salt of the calibration input's random stream (apart from every weight's stream).
_INPUT_SALT = zlib.crc32(b"fuseplanner calibration input")
#: Factors already measured, by (model bytes digest, targets, seed, input shapes); oldest dropped first.
_CACHE: dict[tuple, dict[str, float]] = {}
_CACHE_SIZE = 64


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


def _run_node(view: GraphView, index: int, env: dict[str, np.ndarray], consts: Mapping, ops,
              opset: int) -> list[np.ndarray]:  # fmt: skip
    node = view.nodes[index]
    outs = [o for o in node.output if o]
    shapes = {t: view.shape(t) for t in (*node.input, *outs) if t}
    dtypes = {t: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(view.elem_type(t))) for t in shapes}
    lib = ops.Node.from_onnx(node, shapes, dtypes, consts, opset)
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


def _prepared(model: onnx.ModelProto, input_shapes) -> GraphView:
    """The model at its own input shapes (a dynamic batch dim as 1); where other dims are dynamic, at
    `input_shapes` (the shapes it will run at), else the ModelError that names them."""
    try:
        return GraphView(prepare(model))
    except ModelError:
        if not input_shapes:
            raise
        return GraphView(prepare(model, input_shapes))


def _measure(view: GraphView, targets: Mapping[str, str], seed: int) -> dict[str, float]:
    from fuseplanner.run import ops

    consts, _ = fold_constants(view)
    env: dict[str, np.ndarray] = dict(consts)
    env.update(_inputs(view, seed))
    factors: dict[str, float] = {}
    opset = default_opset(view.model)
    for index in view.compute:
        node = view.nodes[index]
        results = _run_node(view, index, env, consts, ops, opset)
        if node.op_type == "Conv" and node.output[0] in targets:
            bias = env.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            r = _factor(results[0], bias)
            factors[targets[node.output[0]]] = r
            b = 0.0 if bias is None else bias.reshape((1, -1) + (1,) * (results[0].ndim - 2))
            results[0][...] = (results[0] - b) / r + b  # what the rescaled weight computes
        env.update(zip((o for o in node.output if o), results, strict=False))
    return factors


def calibrate(model: onnx.ModelProto, targets: Mapping[str, str], seed: int, input_shapes=None) -> dict[str, float]:
    """Weight name -> the scalar to divide it by, for `targets` (conv output tensor -> its weight
    initializer) of full ModelProto `model` (every initializer inline). Cached by the model's bytes,
    `targets` and `seed`: compiling a model again does not run it again."""
    key = (hashlib.sha256(model.SerializeToString()).digest(), tuple(sorted(targets.items())), int(seed),
           repr(sorted((input_shapes or {}).items())))  # fmt: skip
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = _measure(_prepared(model, input_shapes), targets, seed)
    return dict(_CACHE[key])
