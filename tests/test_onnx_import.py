"""ONNX import: kinds, epilogues, constants, shapes, batch/pinning, structure-only models, bad input."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from bad_models import BAD, bad_files
from onnx import TensorProto, helper, numpy_helper

from fuseplanner import ModelError
from fuseplanner.core.errors import ModelNote
from fuseplanner.frontend import zoo
from fuseplanner.frontend.load import load_model

MODELS = Path(__file__).resolve().parent.parent / "models"


# ---- tiny graphs -----------------------------------------------------------------------------------
def _conv_model(c_in=8, c_out=8, k=3, stride=1, group=1, pads=None, auto_pad=None, hw=16, post=(), opset=18,
                extra_consumer=False):
    """input -> Conv -> post ops -> output; `post` is a list of op types applied in turn."""
    w = numpy_helper.from_array(np.zeros((c_out, c_in // group, k, k), np.float32), "w")
    attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "group": group}
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = pads if pads is not None else [k // 2] * 4
    nodes = [helper.make_node("Conv", ["x", "w"], ["y0"], name="conv", **attrs)]
    inits = [w]
    t = "y0"
    for i, op in enumerate(post):
        nodes.append(helper.make_node(op, [t], [f"y{i + 1}"], name=f"post{i}"))
        t = f"y{i + 1}"
    outputs = [helper.make_tensor_value_info(t, TensorProto.FLOAT, None)]
    if extra_consumer:
        nodes.append(helper.make_node("Neg", ["y0"], ["side"], name="side"))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, hw, hw])],
                              outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize(
    "kwargs, kind",
    [
        ({"c_in": 8, "c_out": 8, "group": 8}, "dw"),
        ({"c_in": 8, "c_out": 16, "group": 8}, "dw"),             # channel multiplier 2
        ({"c_in": 8, "c_out": 8, "group": 8, "k": 5, "stride": 2}, "dw"),
        ({"c_in": 8, "c_out": 8, "group": 8, "k": 1, "pads": [0] * 4}, "dw"),
        ({"c_in": 8, "c_out": 16, "k": 1, "pads": [0] * 4}, "pw"),
        ({"c_in": 8, "c_out": 16, "k": 1, "stride": 2, "pads": [0] * 4}, "pw"),
        ({"c_in": 8, "c_out": 16, "k": 3}, "conv"),
        ({"c_in": 8, "c_out": 8, "group": 2}, "conv"),            # grouped, not depthwise
        ({"c_in": 8, "c_out": 16, "k": 1, "group": 2, "pads": [0] * 4}, "conv"),
        ({"c_in": 1, "c_out": 8, "k": 3}, "conv"),                # a single input channel is a dense conv
    ],
)
def test_conv_kinds(kwargs, kind):
    (op,) = load_model(_conv_model(**kwargs)).ops()
    assert op.kind == kind
    if kind == "dw":
        assert op.multiplier == kwargs["c_out"] // kwargs["c_in"]


def test_conv_fields_flops_params_bytes():
    (op,) = load_model(_conv_model(c_in=8, c_out=16, k=3, stride=2, hw=16)).ops()
    assert op.in_shape == (1, 8, 16, 16) and op.out_shape == (1, 16, 8, 8)
    assert (op.kernel, op.stride, op.pads, op.dilation, op.groups) == ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1)
    assert op.params == 16 * 8 * 9
    assert op.flops == 2 * 16 * 8 * 8 * 8 * 9  # 2 * C_out * H_out * W_out * C_in * k * k
    assert op.input_bytes == 8 * 16 * 16 * 4 and op.output_bytes == 16 * 8 * 8 * 4
    assert op.weight_bytes == 16 * 8 * 9 * 4 and not op.has_bias


def test_auto_pad_same_upper():
    # input 15, k 3, s 2 -> out 8; total pad = (8-1)*2 + 3 - 15 = 2 -> 1 before, 1 after
    (op,) = load_model(_conv_model(k=3, stride=2, hw=15, auto_pad="SAME_UPPER")).ops()
    assert op.out_shape == (1, 8, 8, 8) and op.pads == (1, 1, 1, 1)
    # input 16, k 3, s 2 -> out 8; total pad = 14 + 3 - 16 = 1 -> SAME_UPPER puts it after
    (op,) = load_model(_conv_model(k=3, stride=2, hw=16, auto_pad="SAME_UPPER")).ops()
    assert op.pads == (0, 0, 1, 1)


def test_records_are_frozen():
    op = load_model(_conv_model()).ops()[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.kind = "pw"


# ---- epilogues -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "post, expected",
    [
        (("Relu",), ("relu",)),
        (("HardSwish",), ("hardswish",)),
        (("HardSigmoid",), ("hardsigmoid",)),
        (("Sigmoid",), ("sigmoid",)),
        (("LeakyRelu",), ("leakyrelu",)),
        (("Relu", "Sigmoid"), ("relu",)),  # one activation per kernel: the second stays an op
        (("Tanh",), ()),                    # not an epilogue the kernels apply
    ],
)
def test_single_op_epilogues(post, expected):
    g = load_model(_conv_model(post=post))
    conv = g.op("conv")
    assert conv.epilogue == expected
    assert len(g) == 1 + len(post) - len(expected)
    assert conv.outputs == (f"y{len(expected)}",)


def test_epilogue_not_absorbed_when_output_has_another_consumer():
    g = load_model(_conv_model(post=("Relu",), extra_consumer=True))
    assert g.op("conv").epilogue == () and g.op("conv").outputs == ("y0",)
    assert sorted(g.consumers("y0")) == ["post0", "side"]


def test_batchnorm_and_relu6_folded():
    g = load_model(zoo.mobilenet_v1(width=0.25, bn=True, act="relu6", num_classes=10, weights="external"))
    convs = [op for op in g if op.is_conv]
    assert all(op.epilogue == ("bn", "relu6") for op in convs)
    first = convs[0]
    assert first.epilogue_nodes == ("stem/BatchNormalization", "stem/Clip")
    assert first.params == 8 * 3 * 9 + 4 * 8  # weights + BN scale, bias, mean, var
    assert first.weight_bytes == (8 * 3 * 9 + 8) * 4  # folded weights + folded bias
    assert not any(op.op_type in ("BatchNormalization", "Clip") for op in g)


def test_relu6_from_torch_export():
    g = load_model("mobilenet_v2")
    assert sum(op.epilogue == ("relu6",) for op in g) == 35  # every conv except the 17 projections
    assert not any(op.op_type == "Clip" for op in g)


def test_hardswish_and_hardsigmoid_from_mobilenet_v3():
    g = load_model("mobilenet_v3_large")
    eps = [op.epilogue for op in g if op.is_conv]
    assert eps.count(("hardswish",)) == 20 and eps.count(("hardsigmoid",)) == 8  # SE gates
    assert eps.count(("relu",)) == 19


def test_clip_with_other_bounds_is_clip():
    b = zoo.GraphBuilder("clip", 18)
    y = b.conv("input", 3, 8, 3, prefix="c")
    lo = b.const("lo", np.array(-1.0, np.float32))
    hi = b.const("hi", np.array(1.0, np.float32))
    y = b.node("Clip", [y, lo, hi], name="clip")
    (op,) = load_model(b.build([1, 3, 8, 8], y, [1, 8, 8, 8])).ops()
    assert op.epilogue == ("clip",) and op.has_bias  # the bias is the Conv's own input


def test_silu_pattern():
    g = load_model("mobilevit_xxs")
    stem = g.ops()[0]
    assert stem.epilogue == ("silu",) and stem.epilogue_nodes == ("node_Sigmoid_14", "node_silu")
    assert not any(op.op_type == "Sigmoid" for op in g)
    eff = load_model(zoo.efficientnet_b0(weights="external"))
    se = [op for op in eff if op.kind == "pw" and op.in_shape[2:] == (1, 1)]
    assert [op.epilogue for op in se[:2]] == [("silu",), ("sigmoid",)]  # SE reduce + SiLU, expand + gate


@pytest.mark.parametrize("form, nodes", [("erf", 5), ("tanh", 8), ("op", 1)])
def test_gelu_forms(form, nodes):
    g = load_model(zoo.token_mlp(tokens=16, dim=32, hidden=64, gelu=form))
    fc1, fc2 = [op for op in g if op.kind == "linear"]
    assert fc1.epilogue == ("bias", "gelu") and len(fc1.epilogue_nodes) == 1 + nodes
    assert fc2.epilogue == ("bias",) and fc2.has_bias
    assert fc1.in_shape == (1, 16, 32) and fc1.out_shape == (1, 16, 64)
    assert fc1.flops == 2 * 16 * 32 * 64
    assert g.consumers(fc1.outputs[0]) == [fc2.name]
    assert [op.op_type for op in g if op.kind == "opaque"] == ["LayerNormalization", "Add"]


def test_linear_over_last_dim_only():
    b = zoo.GraphBuilder("m", 18)
    w = b.weight("w", (8, 16))
    y = b.node("MatMul", [w, "input"], name="left")  # constant on the left: not token-wise
    (op,) = load_model(b.build([1, 16, 4], y, [1, 8, 4])).ops()
    assert op.kind == "opaque"


def test_mobilevit_linear_bias_and_silu():
    lin = [op for op in load_model("mobilevit_xxs") if op.kind == "linear"]
    assert Counter(op.epilogue for op in lin) == {("bias",): 27, ("bias", "silu"): 9, (): 1}
    fc1 = next(op for op in lin if op.epilogue == ("bias", "silu"))
    assert fc1.in_shape == (4, 256, 64) and fc1.out_shape == (4, 256, 128)


def test_residual_add_stays_opaque_with_two_inputs():
    g = load_model("mobilenet_v2")
    adds = [op for op in g if op.op_type == "Add"]
    assert len(adds) == 10 and all(op.kind == "opaque" and len(op.inputs) == 2 for op in adds)
    assert all(op.flops == op.out_shape[1] * op.out_shape[2] * op.out_shape[3] for op in adds)


def test_graph_edges_carry_tensor_and_bytes():
    g = load_model("mobilenet_v2")
    a, b = g.order[0], g.order[1]
    data = g.graph.edges[a, b]
    assert data["tensor"] == g.op(a).outputs[0] and data["bytes"] == 32 * 112 * 112 * 4
    assert g.producer(data["tensor"]) == a
    import networkx as nx

    assert nx.is_directed_acyclic_graph(g.graph) and list(nx.topological_sort(g.graph))[0] == g.order[0]


def test_unknown_op_is_opaque_not_a_crash():
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="com.example")
    relu = helper.make_node("Relu", ["y"], ["z"], name="relu")
    graph = helper.make_graph([node, relu], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
    g = load_model(model)
    assert [(op.name, op.kind) for op in g] == [("frob", "opaque"), ("relu", "opaque")]
    assert g.op("frob").in_shape == (1, 4) and g.op("frob").output_shapes == ((),)


def test_unnamed_nodes_are_keyed_by_index():
    model = _conv_model(post=("Tanh",))
    for n in model.graph.node:
        n.name = ""
    assert load_model(model).order == ("#0", "#1")


# ---- constants, converters, structure-only --------------------------------------------------------
def test_structure_only_model_loads_without_weights():
    raw = onnx.load(str(MODELS / "mobilenet_v2.onnx"), load_external_data=False)
    external = [t for t in raw.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert len(external) > 20 and not (MODELS / external[0].external_data[0].value).exists()
    g = load_model(MODELS / "mobilenet_v2.onnx")
    pw = g.ops()[2]
    assert pw.kind == "pw" and pw.params == 32 * 16 and pw.flops == 2 * 16 * 112 * 112 * 32


def test_legacy_opset17_constants_and_identities():
    legacy = load_model("mobilenet_v2_legacy_op17")
    assert legacy.opset == 18  # upgraded
    assert not any(op.op_type in ("Identity", "Constant") for op in legacy)
    dynamo = load_model("mobilenet_v2")
    key = [(op.kind, op.in_shape, op.out_shape, op.epilogue) for op in dynamo if op.is_conv]
    assert [(op.kind, op.in_shape, op.out_shape, op.epilogue) for op in legacy if op.is_conv] == key
    assert all(op.has_bias for op in legacy if op.is_conv)  # biases arrive through Identity nodes


def test_converter_fixture_needs_pinned_dims():
    with pytest.raises(ModelError, match=r"input 'input'.*--input-shape input=1x3x224x224"):
        load_model("mobilenet_v1_converter_op11")


def test_converter_fixture_constant_weights_and_pinned_dims():
    g = load_model("mobilenet_v1_converter_op11", input_shapes={"input": (2, 3, 160, 160)})
    assert g.opset == 18 and g.inputs[0].shape == (2, 3, 160, 160)
    stem = g.ops()[0]
    assert stem.kind == "conv" and stem.out_shape == (2, 8, 80, 80)
    assert stem.params == 8 * 3 * 9 + 4 * 8 and stem.epilogue == ("bn", "relu6")
    head = g.ops()[-1]
    assert head.kind == "linear" and head.in_shape == (2, 256) and head.out_shape == (2, 10)
    assert head.epilogue == ("bias",)
    assert not any(op.op_type in ("Constant", "Shape", "Gather", "Concat", "Unsqueeze") for op in g)


def test_lone_dynamic_batch_defaults_to_one_or_batch():
    model = zoo.mobilenet_v1(width=0.25, num_classes=10, weights="external")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    with pytest.warns(ModelNote, match="dynamic batch dim"):
        assert load_model(model).inputs[0].shape == (1, 3, 224, 224)
    assert load_model(model, batch=3).ops()[0].in_shape == (3, 3, 224, 224)


def test_batch_override_rescales_shapes_and_flops():
    one, eight = load_model("mobilenet_v2"), load_model("mobilenet_v2", batch=8)
    assert eight.ops()[0].in_shape == (8, 3, 224, 224)
    assert eight.ops()[-1].out_shape == (8, 1000)  # the exporter's Reshape [1, 1280] is re-solved
    assert all(b.flops == 8 * a.flops for a, b in zip(one.ops(), eight.ops(), strict=True))


def test_batch_override_on_mobilevit_reshapes():
    g = load_model("mobilevit_xxs", batch=2)
    lin = [op for op in g if op.kind == "linear"]
    assert lin[0].in_shape == (8, 256, 64)  # 2 images x 4 patch positions
    assert g.outputs[0].shape == (2, 1000)


def test_input_shapes_pin_resolution():
    g = load_model("mobilenet_v2", input_shapes={"input": (1, 3, 160, 160)})
    assert g.ops()[0].out_shape == (1, 32, 80, 80)
    assert [op for op in g if op.kind == "pw"][-1].out_shape == (1, 1280, 5, 5)


# ---- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", BAD)
def test_bad_input_raises_one_line_model_error(tmp_path, case):
    path, fragment = bad_files(tmp_path)[case]
    with pytest.raises(ModelError) as info:
        load_model(path)
    message = str(info.value)
    assert fragment in message and "\n" not in message and ":" in message
    assert isinstance(info.value, ValueError)


def test_model_error_for_unknown_input_name_and_rank():
    with pytest.raises(ModelError, match="use one of those names"):
        load_model("mobilenet_v2", input_shapes={"image": (1, 3, 224, 224)})
    with pytest.raises(ModelError, match="rank 4"):
        load_model("mobilenet_v2", input_shapes={"input": (1, 3)})
    with pytest.raises(ModelError, match="batch must be a positive integer"):
        load_model("mobilenet_v2", batch=0)


def test_truncated_graph_that_still_parses():
    model = onnx.load(str(MODELS / "mobilenet_v2.onnx"), load_external_data=False)
    del model.graph.node[5]  # a consumer now reads a tensor nothing produces
    with pytest.raises(ModelError, match="corrupt or truncated"):
        load_model(model)


def test_fp16_model_dtype_and_bytes():
    w = numpy_helper.from_array(np.zeros((16, 8, 1, 1), np.float16), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="pw", kernel_shape=[1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)], initializer=[w])
    (op,) = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)).ops()
    assert op.kind == "pw" and op.dtype == "float16"
    assert op.input_bytes == 8 * 16 * 2 and op.output_bytes == 16 * 16 * 2 and op.weight_bytes == 16 * 8 * 2
