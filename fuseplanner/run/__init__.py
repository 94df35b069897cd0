"""Run a whole planned model: `compile(model, spec, plan)` -> `CompiledModel`, called on arrays.

Modules: `weights` (read, generate, fold), `constants` (load-time folding), `program` (the steps),
`chains` (elementwise chains merged into one step), `memory` (static arena plan), `runtime` (binding
to arrays), `compiled` (the API), `device` (CUDA graphs, timing), `check` (against onnxruntime). The operator library lives in `fuseplanner.run.ops`.
Nothing here imports CuPy until a GPU model is compiled.
"""

from __future__ import annotations

from fuseplanner.run.compiled import CompiledModel, StepInfo, compile, load_plan

__all__ = ["CompiledModel", "StepInfo", "compile", "load_plan"]
