"""`Node`: one statically shaped ONNX node with decoded attributes and constant inputs, and the helpers
every op builder shares (attribute access, ModelError, dtype handling)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from fuseplanner.core.errors import ModelError


def _decode(attr: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_decode_item(v) for v in value]
    return value


def _decode_item(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    return v


@dataclass(frozen=True)
class Node:
    """One ONNX node with static shapes: what `prepare` needs to build its kernel."""

    name: str
    op_type: str
    attrs: Mapping[str, Any]
    input_shapes: tuple[tuple[int, ...] | None, ...]
    input_dtypes: tuple[str | None, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[str, ...]
    consts: tuple[np.ndarray | None, ...] = field(default=())
    opset: int = 18

    @classmethod
    def from_onnx(cls, node: onnx.NodeProto, shapes: Mapping[str, Any], dtypes: Mapping[str, str],
                  consts: Mapping[str, np.ndarray], opset: int) -> Node:
        """Build from a NodeProto and tables keyed by tensor name (absent inputs "" become None).

        Every present input and output must have a static shape and a dtype in the tables."""
        label = node.name or (node.output[0] if node.output else "?")
        missing = [t for t in (*node.input, *node.output) if t and (t not in shapes or t not in dtypes)]
        if missing:
            raise ModelError(f"{node.op_type} node {label!r}: no static shape or dtype for tensor {missing[0]!r}")

        def shape(t: str) -> tuple[int, ...] | None:
            return tuple(int(d) for d in shapes[t]) if t else None

        outs = [t for t in node.output]
        while outs and not outs[-1]:
            outs.pop()
        return cls(
            name=label,
            op_type=node.op_type,
            attrs={a.name: _decode(a) for a in node.attribute},
            input_shapes=tuple(shape(t) for t in node.input),
            input_dtypes=tuple(str(np.dtype(dtypes[t])) if t else None for t in node.input),
            output_shapes=tuple(shape(t) or () for t in outs),
            output_dtypes=tuple(str(np.dtype(dtypes[t])) if t else "float32" for t in outs),
            consts=tuple(consts.get(t) if t else None for t in node.input),
            opset=opset,
        )

    # ---- helpers used by the op builders -------------------------------------------------------------
    def error(self, reason: str) -> ModelError:
        """A one-line ModelError naming this node."""
        return ModelError(f"{self.op_type} node {self.name!r}: {reason}")

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def has_input(self, i: int) -> bool:
        return i < len(self.input_shapes) and self.input_shapes[i] is not None

    def const(self, i: int) -> np.ndarray | None:
        """The host value of input `i` when it is a constant, else None (also for absent inputs)."""
        if i < len(self.consts) and self.has_input(i):
            return self.consts[i]
        return None

    def need_const(self, i: int, what: str) -> np.ndarray:
        value = self.const(i)
        if value is None:
            raise self.error(f"input {i} ({what}) must be a constant (an initializer or Constant node)")
        return np.asarray(value)

    def ints(self, key: str, i: int, default: Any = None) -> list[int] | None:
        """An integer list given as attribute `key` (older opsets) or constant input `i` (newer ones)."""
        if self.has_input(i):
            return [int(v) for v in self.need_const(i, key).reshape(-1)]
        value = self.attrs.get(key, default)
        return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]

    @property
    def in_shape(self) -> tuple[int, ...]:
        return self.input_shapes[0] or ()

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.output_shapes[0]


def is_float(dtype: str | None) -> bool:
    return dtype is not None and np.dtype(dtype).kind == "f"


def compute_dtype(dtype: str | None) -> np.dtype:
    """float32 for fp16 (every reduction and transcendental runs in float32), else the dtype itself."""
    dt = np.dtype(dtype or "float32")
    return np.dtype(np.float32) if dt == np.float16 else dt


def upcast(x: Any) -> Any:
    """`x` as float32 when it is float16, else `x` itself (no copy)."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def store(xp: Any, out: Any, value: Any) -> None:
    """Write `value` (broadcast, any dtype) into `out`."""
    xp.copyto(out, value, casting="unsafe")


def norm_axis(node: Node, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise node.error(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0
