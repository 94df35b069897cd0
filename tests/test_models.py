"""Bundled fixtures and zoo builders: exact layer counts and selected shapes from the published architectures."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from fuseplanner.frontend import zoo
from fuseplanner.frontend.load import bundled_dir, bundled_models, load_model, resolve_model

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"

# (dw, pw, conv, linear): published architectures; dw/pw/conv count Conv nodes only. PW includes the
# squeeze-excitation 1x1 convs (MobileNetV3: 8 SE blocks x 2; EfficientNet-B0: 16 x 2).
EXPECTED = {
    "mobilenet_v1": (13, 13, 1, 1),          # 13 separable blocks, 3x3 stem, classifier
    "mobilenet_v2": (17, 34, 1, 1),          # 17 bottlenecks (16 with expansion) + final 1x1 to 1280
    "mobilenet_v2_legacy_op17": (17, 34, 1, 1),
    "mobilenet_v3_large": (15, 46, 1, 2),    # 15 bnecks, 14 expansions + 15 projections + 16 SE + last 1x1
    "mnasnet1_0": (17, 34, 1, 1),
    "mobilevit_xxs": (7, 21, 7, 37),         # 9 transformer layers x 4 linear + classifier
    "efficientnet_b0": (16, 64, 1, 1),       # 16 MBConv: 15 expansions + 16 projections + 32 SE + head
    "mobilenet_v1_converter_op11": (13, 13, 1, 1),
}
PINNED = {"mobilenet_v1_converter_op11": {"input": (1, 3, 224, 224)}}


def _load(name: str, **kw):
    return load_model(name, input_shapes=PINNED.get(name), **kw)


def test_every_bundled_model_has_expected_counts():
    assert set(bundled_models()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts(name):
    c = _load(name).counts()
    assert (c["dw"], c["pw"], c["conv"], c["linear"]) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bundled_path_resolves_to_the_data_folder(name):
    path = resolve_model(name)
    assert path.parent.resolve() == bundled_dir().resolve() == MODELS_DIR.resolve()


def test_mobilenet_v2_shapes():
    g = _load("mobilenet_v2")
    dws = [op for op in g if op.kind == "dw"]
    assert dws[0].in_shape == (1, 32, 112, 112) and dws[0].out_shape == (1, 32, 112, 112)
    # stride-2 depthwise convs open stages 2, 3, 4 and 6 (Table 2: s = 2 for c = 24, 32, 64, 160)
    assert [op.out_shape[1] for op in dws if op.stride == (2, 2)] == [96, 144, 192, 576]
    last_pw = [op for op in g if op.kind == "pw"][-1]
    assert last_pw.in_shape == (1, 320, 7, 7) and last_pw.out_shape == (1, 1280, 7, 7)
    assert all(op.kernel == (3, 3) and op.groups == op.c_in for op in dws)


def test_mobilenet_v1_shapes():
    g = _load("mobilenet_v1")
    dws = [op for op in g if op.kind == "dw"]
    assert sum(op.stride == (2, 2) for op in dws) == 4  # Table 1: four stride-2 dw layers
    assert dws[-1].in_shape == (1, 1024, 7, 7)
    assert [op for op in g if op.kind == "pw"][0].out_shape == (1, 64, 112, 112)


def test_mobilenet_v3_large_kernels():
    g = _load("mobilenet_v3_large")
    dws = [op for op in g if op.kind == "dw"]
    assert Counter(op.kernel for op in dws) == {(3, 3): 9, (5, 5): 6}
    head = [op for op in g if op.kind == "pw" and op.in_shape[2] == 7][-1]
    assert head.out_shape == (1, 960, 7, 7)


def test_mnasnet_kernels():
    dws = [op for op in _load("mnasnet1_0") if op.kind == "dw"]
    assert Counter(op.kernel for op in dws) == {(3, 3): 7, (5, 5): 10}


def test_efficientnet_b0_shapes():
    g = _load("efficientnet_b0")
    dws = [op for op in g if op.kind == "dw"]
    assert Counter(op.kernel for op in dws) == {(3, 3): 7, (5, 5): 9}  # k5 stages: 40 x2, 112 x3, 192 x4
    assert dws[-1].out_shape == (1, 1152, 7, 7)  # 192 * 6 expanded channels at 7x7
    se = [op for op in g if op.kind == "pw" and op.in_shape[2:] == (1, 1)]
    assert len(se) == 32 and se[0].out_shape == (1, 8, 1, 1)  # 32 // 4 squeeze channels in block 0


def test_mobilevit_linear_layers():
    g = _load("mobilevit_xxs")
    lin = [op for op in g if op.kind == "linear"]
    # first transformer: 2x2 patches of a 32x32 map -> 4 sequences of 256 tokens of width 64; qkv = 3 x 64
    assert lin[0].in_shape == (4, 256, 64) and lin[0].out_shape == (4, 256, 192)
    # one image holds the 4 sequences: 1024 tokens per image, which the kernels take as (1, 1024, 64)
    assert lin[0].images == 1 and lin[0].batch == 1
    assert lin[0].c_in == 64 and lin[0].c_out == 192 and lin[0].hw_in == (1024, 1)
    assert lin[0].kernel_shape(lin[0].in_shape) == (1, 1024, 64)
    # FLOPs 2 x 1024 tokens x 64 x 192 = 25,165,824 per image; batch 8 = 32 sequences, 8 x the FLOPs
    at8 = lin[0].with_batch(8)
    assert lin[0].flops == 2 * 1024 * 64 * 192 == 25_165_824
    assert at8.in_shape == (32, 256, 64) and at8.out_shape == (32, 256, 192) and at8.batch == 8
    assert at8.flops == 8 * 25_165_824 and at8.hw_in == (1024, 1)
    # loaded at batch 8 the same op holds the same shapes (shape inference at 8, not a rescale)
    assert _load("mobilevit_xxs", batch=8).op(lin[0].name).in_shape == at8.in_shape
    widths = Counter(op.c_in for op in lin[:-1] if op.c_out == 3 * op.c_in)
    assert widths == {64: 2, 80: 4, 96: 3}  # transformer depths 2, 4, 3
    assert lin[-1].op_type == "Gemm" and lin[-1].out_shape == (1, 1000)


def test_builder_fixtures_are_up_to_date(tmp_path):
    from script_module import load

    module = load(MODELS_DIR / "build_fixtures.py")
    for path in module.build_builder_fixtures(tmp_path):
        assert path.read_bytes() == (MODELS_DIR / path.name).read_bytes(), f"regenerate {path.name}"


def test_models_folder_stays_small():
    total = sum(p.stat().st_size for p in MODELS_DIR.glob("*.onnx"))
    assert total < 4 * 2**20


@pytest.mark.parametrize(
    "builder, kwargs, expected",
    [
        (zoo.mobilenet_v1, {}, (13, 13, 1, 1)),
        (zoo.mobilenet_v1, {"width": 0.5, "bn": True}, (13, 13, 1, 1)),
        (zoo.mobilenet_v2, {"weights": "external"}, (17, 34, 1, 1)),
        (zoo.efficientnet_b0, {"weights": "external"}, (16, 64, 1, 1)),
        (zoo.token_mlp, {"weights": "external"}, (0, 0, 0, 2)),
    ],
)
def test_builders(builder, kwargs, expected):
    c = load_model(builder(**kwargs)).counts()
    assert (c["dw"], c["pw"], c["conv"], c["linear"]) == expected


def test_builder_mobilenet_v2_matches_torchvision_export():
    built = [(op.kind, op.in_shape, op.out_shape, op.kernel, op.stride) for op in load_model(zoo.mobilenet_v2())
             if op.is_conv]
    exported = [(op.kind, op.in_shape, op.out_shape, op.kernel, op.stride) for op in _load("mobilenet_v2")
                if op.is_conv]
    assert built == exported


def test_make_divisible():
    assert zoo.make_divisible(32 * 0.35) == 16  # 11.2 -> 8 would drop > 10%, so 16
    assert zoo.make_divisible(24 * 0.75) == 24  # 18 -> 16 drops 11% -> 24
    assert zoo.make_divisible(96) == 96
