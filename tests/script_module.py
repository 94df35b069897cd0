"""Load a script or tool of the repository (not a package module) as a module, for its tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def load(path: Path, name: str | None = None):
    """The module at `path`, registered in `sys.modules` under `name` (default: the file's stem) so that
    its dataclasses resolve their annotations."""
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
