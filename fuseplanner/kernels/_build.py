"""Compile the kernel sources (each family's .cu files, the probes) with #defines through CuPy's
NVRTC, cached per (source, name, defines).

CuPy is imported lazily, so `import fuseplanner.kernels` works on machines without it.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from fuseplanner.core.errors import DeviceError

#: Default NVRTC options: C++17, full-precision math (epilogues must match the float64 reference).
DEFAULT_OPTIONS = ("-std=c++17",)


def kernels_dir() -> Path:
    """Directory of the shared kernel headers and the probes (the repository's kernels/, bundled in
    the wheel as fuseplanner/data/kernels)."""
    return Path(str(importlib.resources.files("fuseplanner") / "data" / "kernels"))


@functools.cache
def source_dirs() -> tuple[Path, ...]:
    """Where kernel sources are found, in order: `kernels_dir()`, then every kernel family's folder
    (fuseplanner/kernels/families/<family>/, whose `.cu` files sit beside its modules). Every one is
    an include directory of every compile, so `#include "common.cuh"` works from any of them."""
    families = Path(str(importlib.resources.files("fuseplanner.kernels.families")))
    return (kernels_dir(), *sorted(p for p in families.iterdir() if (p / "__init__.py").is_file()))


def source_path(source: str) -> Path:
    """The file of kernel source `source` (a file name: "dw.cu", "probe_copy.cu") in `source_dirs()`."""
    for d in source_dirs():
        if (d / source).is_file():
            return d / source
    raise DeviceError(f"kernel source {source!r} not found in {kernels_dir()} or a kernel family folder: "
                      "reinstall fuseplanner")


def include_options() -> tuple[str, ...]:
    """`-I` options naming every directory of `source_dirs()`."""
    return tuple(f"-I{d}" for d in source_dirs())


def kernel_source(source: str, defines: Mapping[str, int | str]) -> str:
    """The text compiled for `source` with `defines`: one `#define` line per entry, then the file."""
    path = source_path(source)
    head = "".join(f"#define {k} {_define_value(v)}\n" for k, v in sorted(defines.items()))
    return head + f'#line 1 "{source}"\n' + path.read_text()


def nvcc_report(nvcc: str, text: str, workdir: str | Path, arch: str = "sm_90", timeout: float = 300) -> tuple[int, str]:
    """(exit status, ptxas report) of compiling kernel `text` (a `kernel_source`) to a cubin for
    `arch` with `nvcc --resource-usage` in `workdir`: the compile-only check of registers and spills,
    no GPU needed."""
    fd, name = tempfile.mkstemp(suffix=".cu", dir=workdir)
    os.close(fd)
    src = Path(name)
    src.write_text(text)
    proc = subprocess.run([nvcc, f"-arch={arch}", "-cubin", "-std=c++17", "--resource-usage", *include_options(),
                           "-o", str(src.with_suffix(".cubin")), str(src)], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def _define_value(v: int | str | bool | float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v!r}f"
    return str(v)


def require_device():
    """Import CuPy and check that a CUDA device is usable; return the cupy module.

    Raises DeviceError (one line) when CuPy is missing or no device is visible.
    """
    try:
        import cupy
    except ImportError:
        raise DeviceError(
            "CuPy is not installed: install fuseplanner[gpu] (cupy-cuda13x) on a machine with a CUDA GPU"
        ) from None
    try:
        ok = cupy.cuda.is_available()
    except Exception as exc:  # CUDA driver errors surface as various exception types
        raise DeviceError(f"CUDA is not usable: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
    if not ok:
        raise DeviceError("no CUDA device is visible: run on a machine with an NVIDIA GPU and driver")
    return cupy


def compile_kernel(
    source: str, name: str, defines: Mapping[str, int | str], options: Sequence[str] = ()
):
    """A `cupy.RawKernel` for kernel `name` of `source` (`source_path`) built with `defines`; compiled once."""
    key = (source, name, tuple(sorted((k, _define_value(v)) for k, v in defines.items())), tuple(options))
    return _compile_cached(*key)


@functools.cache
def _compile_cached(source: str, name: str, defines: tuple[tuple[str, str], ...], options: tuple[str, ...]):
    cupy = require_device()
    code = kernel_source(source, dict(defines))
    opts = (*DEFAULT_OPTIONS, *include_options(), *options)
    try:
        module = cupy.RawModule(code=code, options=opts)
        return module.get_function(name)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        raise DeviceError(f"compiling {source}:{name} failed: {first}") from exc


def kernel_attributes(kernel) -> dict[str, int]:
    """What the compiler gave a compiled kernel (a `cupy.RawKernel`): registers per thread, local memory
    per thread (register spills and stack) and static shared memory per block, in bytes."""
    return {"regs": int(kernel.num_regs), "local_bytes": int(kernel.local_size_bytes),
            "static_smem_bytes": int(kernel.shared_size_bytes)}  # fmt: skip


def launch(kernel, grid: tuple[int, int, int], block: int, smem: int, args: tuple) -> None:
    """Launch `kernel` with `smem` bytes of dynamic shared memory (raising the opt-in limit if needed)."""
    if smem > 48 * 1024 and kernel.max_dynamic_shared_size_bytes < smem:
        kernel.max_dynamic_shared_size_bytes = smem
    kernel(grid, (block, 1, 1), args, shared_mem=smem)
