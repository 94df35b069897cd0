"""Export the held-out models of models/holdout.toml as structure-only ONNX into models/holdout/.

    python models/export_holdout.py                 # every model in the list
    python models/export_holdout.py mnasnet0_5 --out /tmp/holdout

Needs torch, torchvision and timm (not project dependencies; CPU wheels are enough). Models get random
weights (no download); tensors over 1024 elements are stripped (`fuseplanner.frontend.zoo.structure_only`),
so the files are small and fuseplanner plans from them (the executor seeds weights for them).
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuseplanner.frontend.holdout import HoldoutModel, holdout_models  # noqa: E402


def build(m: HoldoutModel):
    """The model as a torch.nn.Module in eval mode, random weights."""
    if m.source == "timm":
        import timm

        return timm.create_model(m.arch, pretrained=False).eval()
    import torchvision

    return getattr(torchvision.models, m.arch)(weights=None).eval()


def export(m: HoldoutModel, folder: Path) -> Path:
    """Export one model, strip its weights, write NAME.struct.onnx.gz (gzip-compressed); returns its path."""
    import onnx
    import torch

    from fuseplanner.frontend.zoo import structure_only

    x = torch.randn(1, 3, m.resolution, m.resolution)
    full = folder / f"{m.name}.full.onnx"
    kwargs = {"dynamo": True, "external_data": False} if m.exporter == "torch-dynamo" else {"dynamo": False}
    with torch.no_grad():
        torch.onnx.export(build(m), (x,), str(full), opset_version=m.opset, input_names=["input"],
                          output_names=["logits"], **kwargs)
    out = m.path(folder)
    data = structure_only(onnx.load(str(full)), location="__stripped__.bin").SerializeToString()
    out.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    full.unlink()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Export the held-out models as structure-only ONNX.")
    parser.add_argument("names", nargs="*", help="models of models/holdout.toml (default: all)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "holdout")
    args = parser.parse_args(argv)
    models = holdout_models()
    unknown = sorted(set(args.names) - {m.name for m in models})
    if unknown:
        print(f"error: not in models/holdout.toml: {', '.join(unknown)}", file=sys.stderr)
        return 2
    try:
        import timm  # noqa: F401
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError as exc:
        print(f"error: {exc.name} is not installed: pip install torch torchvision timm", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for m in models:
        if not args.names or m.name in args.names:
            path = export(m, args.out)
            print(f"{path}: {path.stat().st_size / 1024:.0f} KiB ({m.exporter}, opset {m.opset})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
