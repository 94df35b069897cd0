"""Argument helpers shared by CLI commands (model selection, input shapes, batch)."""

from __future__ import annotations

import argparse
import re

from fuseplanner.core.errors import ModelError

_DIMS = re.compile(r"^\d+([x,]\d+)*$")


def parse_input_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``["x=1x3x224x224", ...]`` -> ``{"x": (1, 3, 224, 224)}``; ModelError for malformed entries."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or []:
        name, sep, dims = item.rpartition("=")
        dims = dims.strip().lower().replace("*", "x")
        if not sep or not name.strip() or not _DIMS.match(dims):
            raise ModelError(
                f"bad --input-shape {item!r}: write NAME=DIMS with positive integer dims, e.g. input=1x3x224x224"
            )
        values = tuple(int(d) for d in re.split(r"[x,]", dims))
        if any(d <= 0 for d in values):
            raise ModelError(f"bad --input-shape {item!r}: every dim must be positive, e.g. input=1x3x224x224")
        name = name.strip()
        if name in shapes:
            raise ModelError(f"--input-shape gives {name!r} twice: give each input once")
        shapes[name] = values
    return shapes


def positive_int(text: str) -> int:
    """argparse type for a positive integer (batch sizes, counts)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """MODEL (path or bundled name), --input-shape NAME=DIMS (repeatable) and --batch N."""
    parser.add_argument("model", metavar="MODEL", help="ONNX file, or a bundled model name such as mobilenet_v2")
    parser.add_argument(
        "--input-shape", action="append", default=[], metavar="NAME=DIMS",
        help="pin a model input's shape, e.g. input=1x3x224x224 (repeat for several inputs)",
    )
    parser.add_argument("--batch", type=positive_int, default=None, metavar="N",
                        help="override the batch (leading) dim of every input")


def load_from_args(args: argparse.Namespace):
    """The ModelGraph named by parsed `add_model_arguments` options."""
    from fuseplanner.frontend.load import load_model

    return load_model(args.model, input_shapes=parse_input_shapes(args.input_shape), batch=args.batch)
