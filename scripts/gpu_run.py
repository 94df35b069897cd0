"""One call on a GPU machine: a list of tasks run in order, progress printed, everything written under
one folder and packed into one archive.

    python3 scripts/gpu_run.py OUT TASK [TASK ...] [--name NAME] [--keep] [--dry-run]

Writes OUT/NAME/ (NAME default gpu_run): device.txt, one folder per task (its logs and results),
summary.json and summary.md; packs the folder into OUT/NAME.tar.gz after every task (a timeout keeps
what finished) and removes the folder at the end unless --keep. --dry-run prints the commands only.
Needs only the standard library: wheels carried in .whl/ (pydantic and its needs, absent on the GPU
machine) are installed to /tmp/site first and put on the tasks' PYTHONPATH.

A TASK is NAME[:FIELD...]; a FIELD with "=" is an option (KEY=VALUE), the others are positional:

    tests[:PATH...]                        GPU tests (default tests/gpu), junit XML beside the log
    kernels[:only=S,S][:batches=1,8][:modes=fp32,tf32,fp16][:candidates=4]
                                           layer-by-layer kernels against PyTorch (bench_kernels.py)
    pairs[:KIND...][:batches=1,8][:repeat=50][:shortlist=6]
                                           fused pairs against PyTorch (bench_pairs.py)
    ab:TARGET:OLD[:only=pw_][:batches=1,8][:modes=...]
                                           the kernel benchmark on a copy of the tree whose TARGET
                                           (a file of this tree, e.g. the pw kernel's source
                                           fuseplanner/kernels/families/pw/pw.cu) is OLD (a file, or a
                                           folder laid over the tree), then on this tree;
                                           compare_bench.py of the two
    calibrate                              `fuseplanner calibrate --gpu auto`; later validate tasks use it
    validate:MODEL:DTYPE:TILES[:KEY=VALUE...][:FLAG...]
                                           `fuseplanner validate MODEL --gpu auto --dtype --tiles`,
                                           each KEY=VALUE as --KEY VALUE, each FLAG as --FLAG
    plans:MODEL:DTYPE:BATCH[:specs=h100,PATH]
                                           each spec's plan validated counter-free, then
                                           `fuseplanner analyze plans` of the runs
    ncu-fused:CONFIG[,CONFIG...]           probe_fused.py timed, then each config under ncu --set full
    probe-reads[:CONFIG[,CONFIG...]]       probe_reads.py under ncu with the L1/L2 read counters
    probe-copy[:CONFIG[,CONFIG...]]        probe_copy.py's copy patterns under ncu, the same counters
    placement[:KEY=VALUE...]               probe_placement.py (block placement, clusters)
    plan-speed                             plan_speed.py (planner time per bundled model)

Example: python3 scripts/gpu_run.py $OUT tests calibrate validate:mobilenet_v2:fp32:planned
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = "python3"
CLI = (PY, "-m", "fuseplanner.cli.main")
READ_METRICS = (
    "lts__t_sectors_srcunit_tex_op_read.sum lts__t_requests_srcunit_tex_op_read.sum "
    "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum "
    "lts__t_sectors_srcunit_tex_op_write.sum lts__t_sectors_srcunit_ltcfabric_op_read.sum "
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum "
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum "
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum "
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_access.sum "
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_access_lookup_hit.sum "
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_bypass.sum "
    "l1tex__m_xbar2l1tex_read_sectors.sum lts__t_sectors_srcunit_ltcfabric.sum "
    "dram__bytes_read.sum launch__grid_size launch__cluster_dim_x launch__block_size"
).split()


class TaskError(ValueError):
    """A task the runner cannot parse."""


@dataclass(frozen=True)
class Step:
    """One command of a task: `argv` run with its output in `log` (relative to the task folder), or
    `fn(task_folder, log_file)` for a step decided at run time. `optional` = (option, path): appended
    to argv when that file exists by then."""

    label: str
    argv: tuple[str, ...] = ()
    timeout: int = 600
    fn: Callable[[Path, object], int] | None = None
    optional: tuple[str, str] | None = None


@dataclass(frozen=True)
class Task:
    spec: str
    folder: str
    steps: tuple[Step, ...] = field(default=())


@dataclass
class Context:
    """What a task may refer to: the run folder and whether a calibration runs before it."""

    run_dir: Path
    calibrated: str | None = None
    count: int = 0


def split_fields(text: str) -> tuple[str, list[str], dict[str, str]]:
    """"name:a:b:k=v" -> ("name", ["a", "b"], {"k": "v"})."""
    name, *fields = text.split(":")
    pos = [f for f in fields if "=" not in f]
    opts = dict(f.split("=", 1) for f in fields if "=" in f)
    return name, pos, opts


def _csv(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def task_tests(pos, opts, ctx, folder):
    paths = pos or ["tests/gpu"]
    return [Step("pytest " + " ".join(paths), (PY, "-m", "pytest", *paths, "-q", "-rs",
                                               f"--junitxml={folder}/tests.xml"), int(opts.get("timeout", 600)))]


def _kernels_argv(out: str, opts: dict[str, str], candidates: str) -> tuple[str, ...]:
    return (PY, "benchmarks/bench_kernels.py", out, "--batches", opts.get("batches", "1,8"),
            "--candidates", opts.get("candidates", candidates), "--repeat", opts.get("repeat", "50"),
            "--search-repeat", opts.get("search_repeat", "10"), "--only", opts.get("only", ""),
            "--modes", opts.get("modes", "fp32,tf32,fp16"))  # fmt: skip


def task_kernels(pos, opts, ctx, folder):
    return [Step("bench_kernels", _kernels_argv(f"{folder}/bench", opts, "4"), int(opts.get("timeout", 420)))]


def task_pairs(pos, opts, ctx, folder):
    argv = (PY, "benchmarks/bench_pairs.py", "--out", f"{folder}/pairs", "--batches", *_csv(opts.get("batches", "1,8")),
            "--repeat", opts.get("repeat", "50"), "--shortlist", opts.get("shortlist", "6"))  # fmt: skip
    return [Step("bench_pairs", argv + (("--kinds", *pos) if pos else ()), int(opts.get("timeout", 600)))]


#: A kernel source `ab` can replace: each kernel family's .cu files sit in its folder.
AB_EXAMPLE = "fuseplanner/kernels/families/pw/pw.cu"


def task_ab(pos, opts, ctx, folder):
    if len(pos) != 2:
        raise TaskError(f"ab takes TARGET:OLD, e.g. ab:{AB_EXAMPLE}:pw_old.cu")
    target, old = pos
    if not (ROOT / target).is_file():
        raise TaskError(f"ab: TARGET {target} is not a file of this tree (e.g. {AB_EXAMPLE})")
    tree = str(Path(tempfile.gettempdir()) / f"gpu_run-{Path(folder).name}-old-tree")  # not packed
    opts = {"only": "pw_", "candidates": "0", "search_repeat": "3", **opts}

    def copy_tree(_folder: Path, _log) -> int:
        shutil.rmtree(tree, ignore_errors=True)
        make_old_tree(ROOT, Path(tree), target, Path(old))
        return 0

    def remove_tree(_folder: Path, _log) -> int:
        shutil.rmtree(tree, ignore_errors=True)
        return 0

    old_argv = (PY, "benchmarks/bench_kernels.py", *_kernels_argv(f"{folder}/old", opts, "0")[2:])
    return [Step("copy the tree with the old source", fn=copy_tree),
            Step("bench_kernels, old source", ("sh", "-c", f'cd "{tree}" && PYTHONPATH="{tree}:${{PYTHONPATH:-}}" '
                                               'exec "$@"', "sh", *old_argv), 300),  # fmt: skip
            Step("bench_kernels, this tree", _kernels_argv(f"{folder}/new", opts, "0"), 300),
            Step("compare", (PY, "scripts/compare_bench.py", f"{folder}/old/bench_kernels.json",
                             f"{folder}/new/bench_kernels.json"), 60),
            Step("remove the copied tree", fn=remove_tree)]  # fmt: skip


def make_old_tree(root: Path, dest: Path, target: str, old: Path) -> None:
    """A copy of the package, kernels, benchmarks, specs and models with `target` replaced by `old`
    (a file), or with the files under `old` (a folder) laid over it."""
    for part in ("fuseplanner", "kernels", "benchmarks", "gpu_specs", "models"):
        if (root / part).exists():
            shutil.copytree(root / part, dest / part, dirs_exist_ok=True)
    if old.is_dir():
        shutil.copytree(old, dest, dirs_exist_ok=True)
    else:
        shutil.copy(old, dest / target)


def task_calibrate(pos, opts, ctx, folder):
    ctx.calibrated = f"{folder}/calibrated.toml"
    return [Step("calibrate", (*CLI, "calibrate", "--gpu", "auto", "--out", ctx.calibrated), 120)]


def task_validate(pos, opts, ctx, folder):
    if len(pos) < 3:
        raise TaskError("validate takes MODEL:DTYPE:TILES, e.g. validate:mobilenet_v2:fp32:planned")
    model, dtype, tiles, *flags = pos
    extra = [x for k, v in opts.items() if k != "timeout" for x in (f"--{k}", v)] + [f"--{f}" for f in flags]
    if "--gpu" not in extra:
        extra += ["--gpu", "auto"]
    argv = (*CLI, "validate", model, "--dtype", dtype, "--tiles", tiles, "--out", f"{folder}/run", *extra)
    cal = ("--calibrate", ctx.calibrated) if ctx.calibrated and "--calibrate" not in extra else None
    return [Step(f"validate {model} {dtype} {tiles}", argv, int(opts.get("timeout", 300)), optional=cal)]


def task_plans(pos, opts, ctx, folder):
    if len(pos) != 3:
        raise TaskError("plans takes MODEL:DTYPE:BATCH, e.g. plans:mobilenet_v2:fp32:8:specs=h100,my.toml")
    model, dtype, batch = pos
    steps = []
    for i, spec in enumerate(_csv(opts.get("specs", "h100"))):
        argv = (*CLI, "validate", model, "--gpu", spec, "--dtype", dtype, "--batch", batch, "--tiles", "planned",
                "--no-ncu", "--out", f"{folder}/spec{i}")  # fmt: skip
        steps.append(Step(f"validate the plan of spec {spec}", argv, int(opts.get("timeout", 180))))

    def totals(task_dir: Path, log) -> int:
        runs = sorted(str(p) for p in task_dir.glob("spec*/records.jsonl"))
        if not runs:
            log.write("no plan was validated\n")
            return 1
        argv = (*CLI, "analyze", "plans", *runs, "--markdown", str(task_dir / "plan_totals.md"))
        return subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=120, check=False).returncode

    return [*steps, Step("analyze plans", fn=totals)]


def task_ncu_fused(pos, opts, ctx, folder):
    configs = _csv(":".join(pos))
    if not configs:
        raise TaskError("ncu-fused takes CONFIG[,CONFIG...] as probe_fused.py reads them")
    probe = (PY, "benchmarks/probe_fused.py", "--out", folder)
    return [Step("probe_fused timed", (*probe, "--torch", "--repeat", "50", *configs), 300),
            Step("ncu --set full", ("ncu", "--set", "full", "--cache-control", "all", "--import-source", "no",
                                    "-k", "regex:fused_", "-o", f"{folder}/fused", *probe, "--ncu", *configs), 600),
            Step("ncu details", ("ncu", "--import", f"{folder}/fused.ncu-rep", "--page", "details"), 120)]  # fmt: skip


def _counters_task(stem: str, kernels: str):
    def build(pos, opts, ctx, folder):
        configs = _csv(":".join(pos))

        def run(task_dir: Path, log) -> int:
            return ncu_counters(task_dir, log, stem, kernels, configs)

        return [Step(f"{stem} under ncu", fn=run)]

    return build


def ncu_counters(task_dir: Path, log, stem: str, kernels: str, configs: Sequence[str]) -> int:
    """Run benchmarks/STEM.py under ncu with those of READ_METRICS this ncu knows; writes STEM.csv
    (ncu's CSV) and STEM.jsonl (the launched configs, in order)."""
    query = subprocess.run(["ncu", "--query-metrics", "--chip", "gh100"], capture_output=True, text=True, check=False)
    if query.returncode != 0:
        query = subprocess.run(["ncu", "--query-metrics"], capture_output=True, text=True, check=False)
    (task_dir / "metrics.txt").write_text(query.stdout + query.stderr)
    known = {line.split()[0] for line in query.stdout.splitlines() if line.strip()}
    metrics = [m for m in READ_METRICS if m.startswith("launch__") or m.rsplit(".", 1)[0] in known or m in known]
    log.write(f"metrics: {','.join(metrics)}\n")
    log.flush()
    proc = subprocess.run(["ncu", "--csv", "--cache-control", "all", "--metrics", ",".join(metrics), "-k", kernels,
                           PY, f"benchmarks/{stem}.py", *configs], capture_output=True, text=True, timeout=600,
                          check=False)  # fmt: skip
    lines = proc.stdout.splitlines(keepends=True)
    (task_dir / f"{stem}.jsonl").write_text("".join(x for x in lines if x.startswith("{")))
    (task_dir / f"{stem}.csv").write_text("".join(x for x in lines if not x.startswith("{")))
    log.write(proc.stderr)
    return proc.returncode


def task_placement(pos, opts, ctx, folder):
    extra = [x for k, v in opts.items() for x in (f"--{k}", v)]
    return [Step("probe_placement", (PY, "benchmarks/probe_placement.py", "--out", folder, *extra), 300)]


def task_plan_speed(pos, opts, ctx, folder):
    return [Step("plan_speed", (PY, "benchmarks/plan_speed.py", *[x for k, v in opts.items() for x in (f"--{k}", v)]), 600)]


TASKS = {
    "tests": task_tests, "kernels": task_kernels, "pairs": task_pairs, "ab": task_ab, "calibrate": task_calibrate,
    "validate": task_validate, "plans": task_plans, "ncu-fused": task_ncu_fused,
    "probe-reads": _counters_task("probe_reads", "regex:_kernel|fused_"),
    "probe-copy": _counters_task("probe_copy", "probe_copy"), "placement": task_placement, "plan-speed": task_plan_speed,
}  # fmt: skip


def parse_tasks(texts: Sequence[str], run_dir: Path) -> list[Task]:
    """The tasks named on the command line, each with its folder under `run_dir`."""
    if not texts:
        raise TaskError(f"give at least one task: {', '.join(TASKS)}")
    ctx = Context(run_dir)
    out = []
    for i, text in enumerate(texts, 1):
        name, pos, opts = split_fields(text)
        if name not in TASKS:
            raise TaskError(f"unknown task {name!r} in {text!r}: use one of {', '.join(TASKS)}")
        folder = run_dir / f"{i:02d}-{name}"
        out.append(Task(text, str(folder), tuple(TASKS[name](pos, opts, ctx, str(folder)))))
    return out


def install_wheels(root: Path, env: dict[str, str]) -> None:
    """Install the wheels in root/.whl to /tmp/site and put it first on the tasks' PYTHONPATH."""
    wheels = sorted(str(p) for p in (root / ".whl").glob("*.whl"))
    if not wheels:
        return
    site = "/tmp/site"
    rc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                         "--no-cache-dir", "--upgrade", "--target", site, *wheels], check=False).returncode  # fmt: skip
    if rc == 0:
        env["PYTHONPATH"] = site + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")


def device_lines(env: dict[str, str]) -> list[str]:
    """The GPU, driver and clocks, ncu's and CuPy's versions (what is missing says so)."""
    probes = (["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu", "--format=csv,noheader"],
              ["ncu", "--version"], [PY, "-c", "import cupy; print('cupy', cupy.__version__)"])  # fmt: skip
    out = []
    for argv in probes:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)
            text = (p.stdout or p.stderr).strip().splitlines()
            out.append(text[-1] if text else f"{argv[0]}: no output")
        except (OSError, subprocess.TimeoutExpired) as exc:
            out.append(f"{argv[0]}: {exc}")
    return out


def run_step(step: Step, task_dir: Path, log_path: Path, env: dict[str, str]) -> int:
    """Run one step with its output in `log_path`; its exit status (124 on timeout)."""
    with open(log_path, "w") as log:
        if step.fn is not None:
            try:
                return step.fn(task_dir, log)
            except (OSError, subprocess.SubprocessError) as exc:
                log.write(f"{type(exc).__name__}: {exc}\n")
                return 1
        argv = list(step.argv)
        if step.optional and Path(step.optional[1]).is_file():
            argv += list(step.optional)
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        try:
            return subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=step.timeout, env=env,
                                  check=False).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            log.write(f"\ntimed out after {step.timeout} s\n")
            return 124
        except OSError as exc:
            log.write(f"{exc}\n")
            return 127


def tail(path: Path, n: int = 6) -> str:
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join("    " + x for x in lines[-n:])


def run_tasks(tasks: Sequence[Task], run_dir: Path, archive: Path, env: dict[str, str]) -> list[dict]:
    """Run every task's steps in order (a failed step does not stop the others), printing progress;
    pack `run_dir` into `archive` after each task. Returns the summary rows."""
    summary = []
    for i, task in enumerate(tasks, 1):
        task_dir = Path(task.folder)
        task_dir.mkdir(parents=True, exist_ok=True)
        for k, step in enumerate(task.steps, 1):
            print(f"[{i}/{len(tasks)}] {task.spec}: {step.label} ...", flush=True)
            log = task_dir / f"step{k}.log"
            start = time.monotonic()
            rc = run_step(step, task_dir, log, env)
            secs = round(time.monotonic() - start, 1)
            print(f"[{i}/{len(tasks)}] {task.spec}: {step.label}: exit {rc}, {secs} s\n{tail(log)}", flush=True)
            summary.append({"task": task.spec, "step": step.label, "exit": rc, "seconds": secs,
                            "log": str(log.relative_to(run_dir))})  # fmt: skip
        write_summary(run_dir, summary)
        pack(run_dir, archive)
    return summary


def write_summary(run_dir: Path, rows: Sequence[dict]) -> None:
    (run_dir / "summary.json").write_text(json.dumps(rows, indent=1))
    device = (run_dir / "device.txt").read_text().splitlines() if (run_dir / "device.txt").is_file() else []
    lines = ["# GPU run", "", *(f"- {d}" for d in device), "", "| task | step | exit | seconds | log |",
             "|---|---|---:|---:|---|"]  # fmt: skip
    lines += [f"| {r['task']} | {r['step']} | {r['exit']} | {r['seconds']} | {r['log']} |" for r in rows]
    (run_dir / "summary.md").write_text("\n".join(lines) + "\n")


def pack(run_dir: Path, archive: Path) -> None:
    """`run_dir` as a gzipped tar at `archive` (written beside, then moved: never half an archive)."""
    fd, tmp = tempfile.mkstemp(suffix=".tar.gz", dir=archive.parent)
    os.close(fd)
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(run_dir, arcname=run_dir.name)
    os.replace(tmp, archive)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="Tasks: " + ", ".join(TASKS))
    ap.add_argument("out", help="output folder (created)")
    ap.add_argument("tasks", nargs="*", metavar="TASK", help="tasks to run, in order (see the module docstring)")
    ap.add_argument("--name", default="gpu_run", help="the run folder and archive name (default gpu_run)")
    ap.add_argument("--keep", action="store_true", help="keep the run folder beside the archive")
    ap.add_argument("--dry-run", action="store_true", help="print the steps, run nothing")
    args = ap.parse_intermixed_args(argv)
    out = Path(args.out).resolve()
    run_dir = out / args.name
    try:
        tasks = parse_tasks(args.tasks, run_dir)
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        for t in tasks:
            print(t.spec)
            for s in t.steps:
                opt = f" [{' '.join(s.optional)}, once written]" if s.optional else ""
                print("    " + (" ".join(s.argv) + opt if s.argv else f"({s.label})"))
        return 0
    os.chdir(ROOT)
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    install_wheels(ROOT, env)
    (run_dir / "device.txt").write_text("\n".join(device_lines(env)) + "\n")
    print((run_dir / "device.txt").read_text(), end="", flush=True)
    rows = run_tasks(tasks, run_dir, out / f"{args.name}.tar.gz", env)
    if not args.keep:
        shutil.rmtree(run_dir)
    print(f"archive: {out / args.name}.tar.gz; {sum(r['exit'] == 0 for r in rows)} of {len(rows)} steps exited 0")
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
