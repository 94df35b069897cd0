"""The least-recently-used L2 diagnostic (`validation.whole_lru`): hand-computed caches and one record."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from script_module import load

from fuseplanner.core.errors import PlanError
from fuseplanner.hw.spec import gpu
from fuseplanner.run.memory import plan_memory
from fuseplanner.run.program import LibraryStep, Program, TensorSpec
from fuseplanner.run.runtime import lifetimes
from fuseplanner.validation.whole import read
from fuseplanner.validation.whole_lru import Access, evaluate, lru_traffic, program_accesses, simulate

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "data/records/h100/traffic/fp32fp32_b1/mnasnet0_5.json.gz"
KB = 1024


def test_write_larger_than_the_cache_evicts_dirty_lines():
    steps = [
        # 6 dirty lines into 4: X0 and X1 are evicted dirty -> 2 x 1024 = 2048 written
        [Access(0, 6 * KB, write=True)],
        # X2..X5 are resident: no read. Y (line 0, written without a fetch) evicts X2 -> 1024 written
        [Access(2 * KB, 4 * KB), Access(0, KB, write=True)],
        # 100 bytes of a weight in line 10: 100 read; it evicts X3 (dirty) -> 1024 written
        [Access(10 * KB, 100)],
    ]
    r = simulate(steps, capacity_bytes=4 * KB, line_bytes=KB)
    assert (r.dram_read_bytes, r.dram_write_bytes) == (100, 2048 + 1024 + 1024)  # X4, X5, Y, W stay: not written


def test_rereading_what_was_evicted_reads_it_again():
    # A: 2 lines read (2048). B: 4 dirty lines evict A0 and A1 (clean, nothing written). Reading A again
    # misses both lines (2048 more) and evicts B0 and B1 (dirty: 2048 written).
    steps = [[Access(0, 2 * KB)], [Access(8 * KB, 4 * KB, write=True)], [Access(0, 2 * KB)]]
    r = simulate(steps, capacity_bytes=4 * KB, line_bytes=KB)
    assert (r.dram_read_bytes, r.dram_write_bytes) == (4096, 2048)


def test_a_cache_smaller_than_a_line_is_refused():
    with pytest.raises(PlanError):
        simulate([], capacity_bytes=512, line_bytes=KB)


def _tiny_program() -> Program:
    """x (input) * w -> y; z views y; relu(z) -> out. Every activation is 1024 fp32 = 4096 bytes."""
    f32 = np.dtype(np.float32)
    tensors = {n: TensorSpec(n, (1024,), f32) for n in ("x", "y", "z", "out")}
    w = np.ones(256, np.float32)  # 1024 bytes
    steps = (
        LibraryStep(SimpleNamespace(consts=(None, w)), "Mul", ("x", "w"), ("y",), ("mul",)),
        LibraryStep(SimpleNamespace(consts=(None,)), "Reshape", ("y",), ("z",), ("view",), view=True),
        LibraryStep(SimpleNamespace(consts=(None,)), "Relu", ("z",), ("out",), ("relu",)),
    )
    return Program("tiny", steps, (tensors["x"],), (tensors["out"],), tensors, {"w": w}, (), "fp32", "fp32")


def test_program_accesses_follow_the_memory_plan():
    program = _tiny_program()
    acc = program_accesses(program, plan_memory(lifetimes(program)))
    # pinned x at 0 and out at 4096; y (and its view z) at 8192; arena 12288, so w is at 12288
    assert acc == [[Access(0, 4096), Access(12288, 1024), Access(8192, 4096, True)], [],
                   [Access(8192, 4096), Access(4096, 4096, True)]]  # fmt: skip


def test_tiny_program_by_hand():
    program = _tiny_program()
    compiled = SimpleNamespace(program=program, memory_plan=plan_memory(lifetimes(program)))
    spec = gpu("h100")
    # 8 lines of 1 KiB: x (4 lines, 4096 read), w (1 line, 1024 read), y (4 dirty lines) evicts x0 (clean);
    # relu reads y (hits), out (4 lines) evicts x1, x2, x3, w (clean): 5120 read, nothing written
    assert lru_traffic(compiled, spec, line_bytes=KB, capacity_bytes=8 * KB) == (5120, 0)
    # 4 lines: w evicts x0, y evicts x1..x3 and w (clean); y hits; out evicts y0..y3 (dirty): 4096 written
    assert lru_traffic(compiled, spec, line_bytes=KB, capacity_bytes=4 * KB) == (5120, 4096)


def test_a_saved_record_end_to_end(capsys):
    result = read(RECORD)[0]
    row = evaluate(result, gpu("h100"))
    assert set(row.lru) == {"planned", "unfused"}
    for v in row.lru:
        read_b, write_b = row.lru[v]
        # batch 1 fits in L2: the simulation reads about what was measured (inputs and weights), writes nothing back
        assert write_b == 0
        assert abs(read_b / row.measured[v][0] - 1) < 0.2
        assert row.arena_bytes[v] > 0
    script = load(ROOT / "scripts/lru_traffic.py")
    assert script.main([str(RECORD), "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "| mnasnet0_5 | fp32/fp32 | 1 | planned |" in out and "| held-out | fp32/fp32 | 1 | 1 |" in out  # mnasnet0_5 is held out


def test_script_rejects_a_file_that_is_not_a_record(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    script = load(ROOT / "scripts/lru_traffic.py")
    assert script.main([str(bad)]) == 2
    assert capsys.readouterr().err.startswith("error:")
