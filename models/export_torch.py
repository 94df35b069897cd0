"""Export torchvision/timm models to ONNX (needs torch, and timm for timm models; not project dependencies).

    python models/export_torch.py mobilenet_v2 mobilenet_v3_large timm:mobilevit_xxs --out /tmp/onnx
    python models/export_torch.py efficientnet_b0 --struct          # structure-only copy as well
    python models/export_torch.py mobilenet_v2 --legacy --opset 17  # the TorchScript-based exporter

Models get random weights (no download). ``--struct`` also writes ``NAME.struct.onnx`` whose tensors over
1024 elements point at an external file that does not exist: small files that fuseplanner plans from.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def build(name: str):
    """A torch.nn.Module in eval mode: ``timm:NAME`` from timm, otherwise torchvision.models.NAME."""
    if name.startswith("timm:"):
        import timm

        return timm.create_model(name.split(":", 1)[1], pretrained=False).eval()
    import torchvision

    return getattr(torchvision.models, name)(weights=None).eval()


def export(name: str, out: Path, resolution: int, opset: int, legacy: bool, struct: bool) -> list[Path]:
    """Export one model; returns the files written."""
    import onnx
    import torch

    from fuseplanner.frontend.zoo import structure_only

    model = build(name)
    x = torch.randn(1, 3, resolution, resolution)
    stem = name.replace("timm:", "timm_")
    path = out / f"{stem}_op{opset}_{'legacy' if legacy else 'dynamo'}.onnx"
    with torch.no_grad():
        if legacy:
            torch.onnx.export(model, (x,), str(path), opset_version=opset, dynamo=False,
                              input_names=["input"], output_names=["logits"])
        else:
            torch.onnx.export(model, (x,), str(path), opset_version=opset, dynamo=True, external_data=False,
                              input_names=["input"], output_names=["logits"])
    written = [path]
    if struct:
        stripped = structure_only(onnx.load(str(path)), location="__stripped__.bin")
        spath = path.with_suffix(".struct.onnx")
        spath.write_bytes(stripped.SerializeToString())
        written.append(spath)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Export torchvision/timm models to ONNX.")
    parser.add_argument("models", nargs="+", help="torchvision names, or timm:NAME")
    parser.add_argument("--out", type=Path, default=Path("."), help="output folder")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--opset", type=int, default=18)
    parser.add_argument("--legacy", action="store_true", help="use the TorchScript-based exporter")
    parser.add_argument("--struct", action="store_true", help="also write a structure-only copy")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("error: torch is not installed: pip install torch torchvision timm (CPU wheels are enough)",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        for path in export(name, args.out, args.resolution, args.opset, args.legacy, args.struct):
            print(f"{path}: {path.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
