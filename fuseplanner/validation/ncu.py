"""Traffic counters from Nsight Compute: run a Python workload under ``ncu`` and parse its CSV.

The workload runs in a subprocess (``ncu ... python3 -m MODULE ARGS``); ncu writes its CSV to a log
file so the program's own output never mixes with it. Values are read in base units (bytes, sectors,
nanoseconds) whatever the ncu version prints, and each kernel launch becomes one `KernelRecord`.

Where hardware counters are not permitted (``ERR_NVGPUCTRPERM``: the driver restricts them to
administrators) or the profiler cannot start, `profile` raises `CountersUnavailable` so a caller can
fall back to counter-free measurements.
"""

from __future__ import annotations

import csv
import glob
import io
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fuseplanner.core.errors import DeviceError

#: Counter name -> what it measures. L2 sectors requested by the SMs (GMA) and DRAM bytes, plus time.
METRICS: dict[str, str] = {
    "lts__t_sectors_srcunit_tex_op_read.sum": "L2 sectors read by the SMs",
    "lts__t_sectors_srcunit_tex_op_write.sum": "L2 sectors written by the SMs",
    "dram__bytes_read.sum": "bytes read from DRAM",
    "dram__bytes_write.sum": "bytes written to DRAM",
    "gpu__time_duration.sum": "kernel duration",
}
GMA_READ, GMA_WRITE, DRAM_READ, DRAM_WRITE, DURATION = METRICS
#: Bytes per L2 sector.
SECTOR_BYTES = 32
#: ncu's cache-control modes: "all" flushes every cache before each kernel (cold), "none" keeps them.
CACHE_MODES = ("all", "none")
#: Names the marker kernels of a workload start with (see `split_by_markers`).
MARK_BEGIN = "fuseplanner_mark_begin"
MARK_END = "fuseplanner_mark_end"
#: CUDA source of the (empty) marker kernels a profiled workload launches around each measured item.
MARKER_SOURCE = (f'extern "C" __global__ void {MARK_BEGIN}() {{}}\n'
                 f'extern "C" __global__ void {MARK_END}() {{}}\n')


class Markers:
    """The marker kernels compiled once in a profiled process; `region(run)` is one marked region."""

    def __init__(self, cp) -> None:
        mod = cp.RawModule(code=MARKER_SOURCE)
        self._cp, self._begin, self._end = cp, mod.get_function(MARK_BEGIN), mod.get_function(MARK_END)

    def region(self, run=None) -> None:
        """Synchronize, launch the begin marker, `run()` (nothing when None), the end marker, and
        synchronize: the kernels of `run` become one region of `split_by_markers`."""
        stream = self._cp.cuda.get_current_stream()
        stream.synchronize()
        self._begin((1,), (1,), ())
        if run is not None:
            run()
        self._end((1,), (1,), ())
        stream.synchronize()

# Unit name -> factor to the base unit. ncu has printed both long ("Kbyte", "usecond") and short
# ("KB", "us") names across versions; its byte prefixes are decimal (1 Kbyte = 1000 bytes).
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_TIME = {
    "nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
    "second": 1.0, "s": 1.0, "psecond": 1e-12, "ps": 1e-12,
}
_UNIT_RE = re.compile(r"^(?P<prefix>Ki|Mi|Gi|Ti|K|M|G|T|k)?(?P<base>byte|B|sector|inst|cycle|request|warp|thread|block)s?$")

#: Messages with which ncu says it cannot read counters, and what they mean.
_NO_COUNTERS = (
    ("ERR_NVGPUCTRPERM", "the driver allows GPU performance counters only to administrators "
     "(ERR_NVGPUCTRPERM); run as root or set NVreg_RestrictProfilingToAdminUsers=0"),
    ("Failed to initialize the profiler", "Nsight Compute could not start its profiler on this system"),
    ("LibraryNotLoaded", "Nsight Compute could not load its profiling library on this system"),
    ("device is not supported", "Nsight Compute does not support this GPU"),
    ("Device not supported", "Nsight Compute does not support this GPU"),
)


class CountersUnavailable(DeviceError):
    """Nsight Compute is missing or may not read hardware counters here; measure without counters."""


@dataclass(frozen=True)
class KernelRecord:
    """One profiled kernel launch, its metrics in base units (sectors, bytes, seconds)."""

    id: int
    kernel: str
    block: str = ""
    grid: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)

    def get(self, metric: str) -> float | None:
        return self.metrics.get(metric)

    @property
    def gma_read_bytes(self) -> float | None:
        v = self.get(GMA_READ)
        return None if v is None else v * SECTOR_BYTES

    @property
    def gma_write_bytes(self) -> float | None:
        v = self.get(GMA_WRITE)
        return None if v is None else v * SECTOR_BYTES

    @property
    def dram_read_bytes(self) -> float | None:
        return self.get(DRAM_READ)

    @property
    def dram_write_bytes(self) -> float | None:
        return self.get(DRAM_WRITE)

    @property
    def time_s(self) -> float | None:
        return self.get(DURATION)


@dataclass(frozen=True)
class Traffic:
    """Traffic and time summed over one or more kernel launches (None where a counter is missing)."""

    gma_read_bytes: float | None
    gma_write_bytes: float | None
    dram_read_bytes: float | None
    dram_write_bytes: float | None
    time_s: float | None
    kernels: int

    @property
    def gma_bytes(self) -> float | None:
        return _add(self.gma_read_bytes, self.gma_write_bytes)

    @property
    def dram_bytes(self) -> float | None:
        return _add(self.dram_read_bytes, self.dram_write_bytes)

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "gma_read_bytes": self.gma_read_bytes,
            "gma_write_bytes": self.gma_write_bytes,
            "gma_bytes": self.gma_bytes,
            "dram_read_bytes": self.dram_read_bytes,
            "dram_write_bytes": self.dram_write_bytes,
            "dram_bytes": self.dram_bytes,
            "time_s": self.time_s,
            "kernels": self.kernels,
        }


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def total(records: Iterable[KernelRecord]) -> Traffic:
    """Sum the traffic and time of several launches (e.g. the two kernels of an unfused pair)."""
    recs = list(records)

    def s(attr: str) -> float | None:
        vals = [getattr(r, attr) for r in recs]
        return None if not vals or any(v is None for v in vals) else float(sum(vals))

    return Traffic(s("gma_read_bytes"), s("gma_write_bytes"), s("dram_read_bytes"), s("dram_write_bytes"),
                   s("time_s"), len(recs))


# ---- parsing ----------------------------------------------------------------------------------------


def parse_number(text: str) -> float | None:
    """A metric value as ncu prints it: "118,897", "1.82", "1 822 720", "9,5" (decimal comma); None for n/a."""
    t = text.strip().replace("\u202f", "").replace("\xa0", "").replace(" ", "")
    if not t or t.lower() in ("n/a", "nan", "-", "(!)"):
        return None
    if "," in t:
        if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d*)?([eE][-+]?\d+)?", t):
            t = t.replace(",", "")  # thousands separators
        elif re.fullmatch(r"[-+]?\d+,\d+", t):
            t = t.replace(",", ".")  # decimal comma (some locales)
        else:
            t = t.replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def unit_factor(unit: str) -> float | None:
    """Factor that turns a value in `unit` into its base unit (bytes, sectors, seconds); None if unknown."""
    u = unit.strip()
    if u in _TIME:
        return _TIME[u]
    if u in ("", "%", "ratio", "none"):
        return 1.0
    m = _UNIT_RE.match(u)
    if not m:
        return None
    prefix = m.group("prefix") or ""
    if prefix in _BINARY:
        return _BINARY[prefix]
    return _SCALE[prefix.upper()]


def to_base(value: str, unit: str) -> float | None:
    """A metric value string with its unit, in base units; None for missing values or unknown units."""
    v = parse_number(value)
    f = unit_factor(unit)
    return None if v is None or f is None else v * f


def _header_start(text: str) -> int:
    """Offset of the CSV header line ("ID",...) in ncu output that may hold other lines before it."""
    m = re.search(r'^"ID",', text, flags=re.MULTILINE)
    if m is None:
        return -1
    return m.start()


def parse_csv(text: str) -> list[KernelRecord]:
    """Parse ``ncu --csv`` output (one row per kernel and metric) into one record per launch, in order.

    Lines before the header (``==PROF==`` messages, program output) and after the table are skipped;
    values are converted to base units using the "Metric Unit" column.
    """
    start = _header_start(text)
    if start < 0:
        return []
    rows = csv.DictReader(io.StringIO(text[start:]))
    kernels: dict[int, dict] = {}
    for row in rows:
        rid = (row.get("ID") or "").strip()
        if not rid.isdigit():
            continue  # a trailing ==PROF== line or blank
        rec = kernels.setdefault(int(rid), {
            "kernel": (row.get("Kernel Name") or "").strip(),
            "block": (row.get("Block Size") or "").strip(),
            "grid": (row.get("Grid Size") or "").strip(),
            "metrics": {},
        })
        name = (row.get("Metric Name") or "").strip()
        if not name:
            continue
        value = to_base(row.get("Metric Value") or "", row.get("Metric Unit") or "")
        if value is not None:
            rec["metrics"][name] = value
    return [KernelRecord(id=i, **kernels[i]) for i in sorted(kernels)]


def counters_problem(text: str) -> str | None:
    """Why ncu could not read counters, from its output; None when nothing says so."""
    for needle, reason in _NO_COUNTERS:
        if needle in text:
            return reason
    return None


def split_by_markers(records: Sequence[KernelRecord], begin: str = MARK_BEGIN, end: str = MARK_END
                     ) -> list[list[KernelRecord]]:
    """Kernel launches between each pair of begin/end marker kernels, one list per marked region.

    A workload launches the (empty) begin marker, the kernels of one measured item, then the end
    marker; kernels outside any region (set-up, warm-up, data preparation) are dropped.
    """
    regions: list[list[KernelRecord]] = []
    current: list[KernelRecord] | None = None
    for r in records:
        if r.kernel.startswith(begin):
            current = []
        elif r.kernel.startswith(end):
            if current is not None:
                regions.append(current)
            current = None
        elif current is not None:
            current.append(r)
    return regions


# ---- running ----------------------------------------------------------------------------------------


def find_ncu() -> str | None:
    """Path of the ``ncu`` executable: on PATH, or in the usual CUDA / Nsight Compute folders."""
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu"):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def command(argv: Sequence[str], *, log_file: str, cache: str = "all", kernel_regex: str | None = None,
            metrics: Iterable[str] = METRICS, ncu: str = "ncu", graph: bool = False) -> list[str]:
    """The ncu command line that profiles `argv` and writes base-unit CSV to `log_file`; `graph`: each
    CUDA-graph launch is one workload (a record named "graph"), not one record per kernel node."""
    if cache not in CACHE_MODES:
        raise ValueError(f"unknown cache mode {cache!r}: use one of {', '.join(CACHE_MODES)}")
    cmd = [ncu, "--csv", "--print-units", "base", "--metrics", ",".join(metrics),
           "--cache-control", cache, "--clock-control", "none", "--target-processes", "all",
           "--log-file", log_file]
    if graph:
        cmd += ["--graph-profiling", "graph"]
    if kernel_regex:
        cmd += ["-k", f"regex:{kernel_regex}"]
    return [*cmd, *argv]


def profile(argv: Sequence[str], *, cache: str = "all", kernel_regex: str | None = None,
            timeout_s: float = 600.0, ncu: str | None = None, cwd: str | Path | None = None,
            env: Mapping[str, str] | None = None, graph: bool = False) -> list[KernelRecord]:
    """Run `argv` (e.g. ``[sys.executable, "-m", "pkg.worker", "job"]``) under ncu; one record per launch.

    Raises `CountersUnavailable` when ncu is missing or may not read counters, and `DeviceError` when
    the workload fails or times out.
    """
    exe = ncu or find_ncu()
    if exe is None:
        raise CountersUnavailable("Nsight Compute (ncu) is not installed or not on PATH")
    with tempfile.TemporaryDirectory(prefix="fuseplanner-ncu-") as tmp:
        log = str(Path(tmp) / "ncu.csv")
        cmd = command(argv, log_file=log, cache=cache, kernel_regex=kernel_regex, ncu=exe, graph=graph)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=cwd,
                                  env=dict(env) if env is not None else None, check=False)
        except subprocess.TimeoutExpired:
            raise DeviceError(f"ncu run exceeded {timeout_s:.0f} s; profile fewer kernels") from None
        except OSError as exc:
            raise CountersUnavailable(f"cannot start ncu ({exc})") from None
        text = Path(log).read_text(errors="replace") if Path(log).exists() else ""
    output = "\n".join((text, proc.stdout, proc.stderr))
    problem = counters_problem(output)
    if problem:
        raise CountersUnavailable(problem)
    records = parse_csv(text) or parse_csv(proc.stdout)
    if proc.returncode != 0 and not records:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DeviceError(f"profiled workload failed (exit {proc.returncode}): {tail[0]}")
    return records


def python_argv(module: str, *args: str) -> list[str]:
    """Command line that runs a module of this package with the current interpreter."""
    return [sys.executable, "-m", module, *args]
