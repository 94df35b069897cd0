"""A read-only view of a shape-inferred ONNX graph: which tensors are constants, who consumes what.

Constants are initializers, Constant node outputs, outputs of shape-only nodes (Shape/Size of a tensor
with a static shape) and anything computed only from constants (the Identity/Cast/Transpose chains
that legacy exporters and converters put in front of weights). Nodes that produce only constants are
not operators of the model: they run once at load time in any runtime.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator

import numpy as np
import onnx

from fuseplanner.frontend.shapes import (
    Shape,
    constant_node_tensor,
    initializer_names,
    inline_value,
    shape_table,
)

_SHAPE_ONLY = ("Shape", "Size")
#: Ops that pass a constant through unchanged (followed when reading a small constant's value).
_PASS_THROUGH = ("Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten")


def _subgraph_inputs(node: onnx.NodeProto) -> Iterator[str]:
    """Names read by nodes inside the node's subgraphs (If/Loop/Scan bodies), recursively."""
    for attr in node.attribute:
        graphs = list(attr.graphs)
        if attr.HasField("g"):
            graphs.append(attr.g)
        for g in graphs:
            for inner in g.node:
                yield from (i for i in inner.input if i)
                yield from _subgraph_inputs(inner)


class GraphView:
    """Shapes, constants, producers and consumers of a shape-inferred ModelProto."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.nodes: list[onnx.NodeProto] = list(model.graph.node)
        self.shapes = shape_table(model)
        self.initializers = {t.name: t for t in model.graph.initializer}
        self.constant_nodes = {
            n.output[0]: n for n in self.nodes if n.op_type == "Constant" and n.output
        }
        self.graph_outputs = {o.name for o in model.graph.output}
        self.const: set[str] = initializer_names(model) | set(self.constant_nodes)
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = defaultdict(list)
        self.compute: list[int] = []
        self._classify()

    # ---- construction ------------------------------------------------------------------------
    def _static(self, name: str) -> bool:
        shape = self.shape(name)
        return shape is not None and all(d is not None for d in shape)

    def _classify(self) -> None:
        for index, node in enumerate(self.nodes):
            for out in node.output:
                if out:
                    self.producer[out] = index
            inputs = [i for i in node.input if i]
            constant = node.op_type == "Constant" or (
                node.op_type in _SHAPE_ONLY and inputs and self._static(inputs[0])
            )
            has_subgraph = any(a.HasField("g") or len(a.graphs) for a in node.attribute)
            if not constant and not has_subgraph and node.op_type not in ("RandomNormal", "RandomUniform"):
                constant = all(i in self.const for i in inputs) and bool(inputs)
            if constant:
                self.const.update(o for o in node.output if o)
                continue
            self.compute.append(index)
            reads = set(inputs) | set(_subgraph_inputs(node))
            for name in reads:
                if name not in self.const:
                    self.consumers[name].append(index)

    # ---- queries -----------------------------------------------------------------------------
    def shape(self, name: str) -> Shape | None:
        entry = self.shapes.get(name)
        return entry[0] if entry else None

    def elem_type(self, name: str) -> int:
        entry = self.shapes.get(name)
        return entry[1] if entry else onnx.TensorProto.FLOAT

    def is_const(self, name: str) -> bool:
        return name in self.const

    def activations(self, node: onnx.NodeProto) -> list[str]:
        """Non-constant, non-empty inputs of a node (in input order)."""
        return [i for i in node.input if i and i not in self.const]

    def numel(self, name: str) -> int:
        """Element count of a tensor with a known static shape, else 0."""
        shape = self.shape(name)
        if shape is None or any(d is None for d in shape):
            return 0
        return math.prod(shape)  # type: ignore[arg-type]

    def value(self, name: str, max_elements: int = 64) -> np.ndarray | None:
        """Values of a small constant stored inline (following Identity-like chains); None otherwise."""
        for _ in range(16):
            if name in self.initializers:
                return inline_value(self.initializers[name], max_elements)
            if name in self.constant_nodes:
                tensor = constant_node_tensor(self.constant_nodes[name])
                return None if tensor is None else inline_value(tensor, max_elements)
            index = self.producer.get(name)
            if index is None or name not in self.const:
                return None
            node = self.nodes[index]
            if node.op_type not in _PASS_THROUGH or not node.input:
                return None
            name = node.input[0]
        return None

    def only_consumers(self, tensor: str) -> list[int]:
        """Compute nodes reading `tensor` (empty when it is a graph output: that must stay in memory)."""
        if tensor in self.graph_outputs:
            return []
        return list(self.consumers.get(tensor, ()))

    def node_name(self, index: int) -> str:
        """Record key of a node: its ONNX name, or ``#<index>`` when the name is empty."""
        return self.nodes[index].name or f"#{index}"

    def attr(self, node: onnx.NodeProto, name: str, default=None):
        for a in node.attribute:
            if a.name == name:
                return onnx.helper.get_attribute_value(a)
        return default
