"""The held-out model list (`models/holdout.toml`): models no fitted value is ever chosen on.

`holdout_models()` reads the list as `HoldoutModel` records (each its exporter recipe);
`HoldoutModel.path` is where `models/export_holdout.py` writes its structure-only ONNX file
(`models/holdout/NAME.struct.onnx.gz`, gzip-compressed), and `exported()` lists the entries whose file exists.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fuseplanner.core.errors import ModelError


class HoldoutModel(BaseModel):
    """One held-out model and how to export it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9_]+$")
    source: Literal["torchvision", "timm"]
    arch: str
    resolution: int = Field(gt=0)
    exporter: Literal["torch-dynamo", "torch-legacy"]
    opset: int = Field(ge=13)

    def path(self, folder: Path | None = None) -> Path:
        """The exported structure-only file (default folder: the bundled models' `holdout/`)."""
        return (folder or _models_dir() / "holdout") / f"{self.name}.struct.onnx.gz"


def _models_dir() -> Path:
    return Path(str(resources.files("fuseplanner") / "data" / "models"))


def holdout_models(path: Path | None = None) -> tuple[HoldoutModel, ...]:
    """The held-out list (default the bundled `models/holdout.toml`)."""
    p = path or _models_dir() / "holdout.toml"
    try:
        table = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ModelError(f"cannot read the held-out list {str(p)!r}: {exc}") from None
    try:
        models = tuple(HoldoutModel.model_validate(m) for m in table.get("model", []))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ModelError(f"{p}: field {'.'.join(map(str, err['loc']))!r}: {err['msg']}") from None
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise ModelError(f"{p}: a model name appears twice")
    return models


def exported(folder: Path | None = None) -> tuple[HoldoutModel, ...]:
    """The held-out models whose exported file exists."""
    return tuple(m for m in holdout_models() if m.path(folder).is_file())
