"""How far PyTorch's own TF32 and fp16 outputs drift from its exact fp32 outputs, with the metric of
`fuseplanner run --check` (max over outputs of ||out - ref||_2 / ||ref||_2), on the PyTorch modules of the
bundled architectures (random init, eval mode, one random input per model): context for the executor's
TF32 (5e-3) and fp16 (2e-2) tolerances. Needs torch, torchvision and timm on a CUDA machine.

    python3 benchmarks/torch_drift.py [--models efficientnet_b0 ...] [--seeds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e import TORCH_MODELS  # noqa: E402


def _module(name: str):
    lib, ctor, side = TORCH_MODELS[name]
    if lib == "timm":
        import timm

        return timm.create_model(ctor, pretrained=False), side
    import torchvision

    return getattr(torchvision.models, ctor)(weights=None), side


def drift(name: str, seed: int) -> tuple[float, float]:
    """(TF32 error, fp16 error) of one randomly initialised module against its exact fp32 output."""
    import torch

    torch.manual_seed(seed)
    net, side = _module(name)
    net = net.eval().cuda()
    x = torch.randn(1, 3, side, side, device="cuda")
    errors = []
    with torch.inference_mode():
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        ref = net(x).double()
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
        errors.append(float((net(x).double() - ref).norm() / ref.norm()))
        errors.append(float((net.half()(x.half()).double() - ref).norm() / ref.norm()))
    return errors[0], errors[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(TORCH_MODELS), choices=list(TORCH_MODELS))
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    print("| model | TF32 error (median of seeds) | fp16 error (median of seeds) |\n|---|---|---|")
    for name in args.models:
        runs = [drift(name, s) for s in range(args.seeds)]
        print(f"| {name} | {statistics.median(r[0] for r in runs):.2e} | {statistics.median(r[1] for r in runs):.2e} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
