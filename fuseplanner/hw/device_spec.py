"""A GPU spec built from the local device's properties, for a GPU no bundled spec describes.

`spec_from_properties` turns CUDA device properties (the keys of ``cudaDeviceProp`` as CuPy's
``getDeviceProperties`` returns them) into an uncalibrated `GpuSpec`: counts and sizes as the device
reports them; peak rates from the SM count, the clock and per-SM rates of its compute capability;
DRAM bandwidth from the memory clock and bus width (double data rate); L2 bandwidth, launch overhead
and latency as labelled estimates. Its kernel fit is borrowed (`spec.DEFAULT_FIT`). `local_spec`
gives the bundled spec of device 0 when one matches, else this one with a note saying it is
uncalibrated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fuseplanner.core.errors import SpecError
from fuseplanner.hw.spec import GpuSpec, match_device

#: FLOPs per clock per SM by (major, minor) compute capability, else by major, else the default:
#: (fp32 FMA, fp16 without tensor cores, dense fp16 tensor cores with fp32 accumulate).
SM_RATES: dict[tuple[int, int] | int, tuple[int, int, int]] = {
    (8, 0): (128, 512, 2048),  # A100: 64 FP32 lanes, 2x FP16, 1024 FMA/clk tensor
    (9, 0): (256, 512, 4096),  # H100/H200
    (10, 0): (256, 512, 8192),
    8: (256, 256, 1024),  # sm_86 / sm_87 / sm_89: 128 FP32 lanes, FP16 at the FP32 rate
}
DEFAULT_RATES = (256, 256, 1024)
#: L1 + shared memory per SM by compute capability (CUDA tuning guides), else `smem_per_sm + 32 KiB`.
L1_BYTES = {(8, 0): 196608, (9, 0): 262144, (8, 6): 131072, (8, 9): 131072, (8, 7): 196608}
L2_BYTES_PER_CLOCK_PER_SM = 40  # estimate: about 10 TB/s on an H100 SXM
LAUNCH_OVERHEAD_S = 2.5e-6  # estimate: a little above the H100 measurement
ESTIMATED = ("dram_bw_bytes_per_s", "l2_bw_bytes_per_s", "fp32_flops", "fp16_flops", "fp16_tc_flops", "tf32_tc_flops",
             "launch_overhead_s", "mem_latency_s", "l2_usable_fraction", "clock_hz")  # fmt: skip
CALIBRATE_HINT = "fuseplanner calibrate --out FILE"


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _need(props: Mapping[str, Any], key: str) -> int:
    v = props.get(key)
    if not isinstance(v, int | float) or v <= 0:
        raise SpecError(f"device property {key!r} is missing or not positive ({v!r}): pass --gpu NAME|PATH")
    return int(v)


def stem(name: str) -> str:
    """A spec name for a device name: 'NVIDIA H100 PCIe' -> 'nvidia_h100_pcie'."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "local_gpu"


def spec_from_properties(props: Mapping[str, Any]) -> GpuSpec:
    """An uncalibrated spec from device properties (``cudaDeviceProp`` keys; ``clockRate`` and
    ``memoryClockRate`` in kHz, ``memoryBusWidth`` in bits). Raises SpecError when a needed one is missing."""
    name = _text(props.get("name", "local GPU"))
    major, minor = _need(props, "major"), int(props.get("minor", 0))
    sms, clock = _need(props, "multiProcessorCount"), _need(props, "clockRate") * 1e3
    fp32, fp16, tc = SM_RATES.get((major, minor)) or SM_RATES.get(major) or DEFAULT_RATES
    smem_sm = _need(props, "sharedMemPerMultiprocessor")
    dram = 2 * _need(props, "memoryClockRate") * 1e3 * _need(props, "memoryBusWidth") / 8
    how = (f"estimate from the device properties of {name} (`--gpu auto`, no bundled spec): "
           f"{sms} SMs x {clock / 1e6:.0f} MHz x ")
    sources = {
        "dram_bw_bytes_per_s": f"estimate: 2 x memory clock {props['memoryClockRate'] / 1e3:.0f} MHz x "
        f"{props['memoryBusWidth']}-bit bus / 8 (double data rate); calibrate",
        "l2_bw_bytes_per_s": f"estimate: {L2_BYTES_PER_CLOCK_PER_SM} B per clock per SM; calibrate",
        "fp32_flops": how + f"{fp32} FLOP/clock per SM (compute capability {major}.{minor}); calibrate",
        "fp16_flops": how + f"{fp16} FLOP/clock per SM; calibrate",
        "fp16_tc_flops": how + f"{tc} dense FP16 tensor FLOP/clock per SM; calibrate",
        "tf32_tc_flops": how + f"{tc // 2} dense TF32 tensor FLOP/clock per SM",
        "clock_hz": "cudaDevAttrClockRate (the maximum clock; the sustained clock may be lower)",
        "launch_overhead_s": "estimate; calibrate", "mem_latency_s": "schema default; calibrate",
    }  # fmt: skip
    data = {
        "name": stem(name), "full_name": name, "compute_capability": f"{major}.{minor}", "device_names": (name,),
        "sm_count": sms, "max_threads_per_sm": _need(props, "maxThreadsPerMultiProcessor"),
        "max_threads_per_block": _need(props, "maxThreadsPerBlock"),
        "max_blocks_per_sm": int(props.get("maxBlocksPerMultiProcessor") or 16),
        "regs_per_sm": _need(props, "regsPerMultiprocessor"), "max_regs_per_thread": 255,
        "smem_per_sm_bytes": smem_sm,
        "smem_per_block_bytes": int(props.get("sharedMemPerBlockOptin") or props.get("sharedMemPerBlock") or smem_sm),
        "smem_reserved_per_block_bytes": int(props.get("reservedSharedMemPerBlock") or 0),
        "l1_bytes": max(L1_BYTES.get((major, minor), smem_sm + 32768), smem_sm),
        "l2_bytes": _need(props, "l2CacheSize"), "dram_bw_bytes_per_s": dram,
        "l2_bw_bytes_per_s": L2_BYTES_PER_CLOCK_PER_SM * sms * clock,
        "fp32_flops": fp32 * sms * clock, "fp16_flops": fp16 * sms * clock, "fp16_tc_flops": tc * sms * clock,
        "tf32_tc_flops": tc / 2 * sms * clock, "clock_hz": clock, "launch_overhead_s": LAUNCH_OVERHEAD_S,
        "warp_size": int(props.get("warpSize") or 32), "estimated": ESTIMATED, "sources": sources,
    }  # fmt: skip
    return GpuSpec.model_validate(data)


def uncalibrated_note(spec: GpuSpec) -> str:
    """The one `note:` line for a spec built from device properties."""
    return (f"note: no bundled spec matches {spec.full_name}: using one built from its device properties, "
            f"uncalibrated (estimated rates, borrowed kernel fit); run `{CALIBRATE_HINT}` and pass --gpu FILE")


def device_properties(device: int = 0) -> dict[str, Any]:
    """Device `device`'s properties via CuPy, with the clocks from device attributes where the runtime's
    property struct no longer carries them (CUDA 13)."""
    import cupy

    rt = cupy.cuda.runtime
    props = dict(rt.getDeviceProperties(device))
    for key, attr in (("clockRate", 13), ("memoryClockRate", 36), ("memoryBusWidth", 37)):
        if not props.get(key):
            props[key] = rt.deviceGetAttribute(attr, device)
    return props


def local_spec(device: int = 0) -> tuple[GpuSpec | None, str]:
    """(spec, note) of the local GPU: its bundled spec (no note), else one built from its properties
    (with `uncalibrated_note`); (None, "") without CuPy or a device."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() <= device:
            return None, ""
        props = device_properties(device)
    except Exception:  # no CuPy, no driver, no device: nothing to describe
        return None, ""
    found = match_device(_text(props.get("name", "")), int(props.get("multiProcessorCount", 0)),
                         f"{props.get('major')}.{props.get('minor')}")  # fmt: skip
    if found is not None:
        return found, ""
    spec = spec_from_properties(props)
    return spec, uncalibrated_note(spec)
