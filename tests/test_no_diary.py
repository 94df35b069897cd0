"""Code, specs, tests and docs are reference, not a diary: no session tags, rounds, evidence folders
named by date, commit hashes, or dates outside tables (tracked files, read from the git index)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = {".py", ".toml", ".md", ".cu", ".cuh", ".sh", ".cfg", ".txt", ".yml", ".yaml"}

#: (name, pattern) of diary text; each applies to every scanned line
PATTERNS = [
    ("session tag", re.compile(r"\bs\d\d[a-z]?\b")),
    ("session", re.compile(r"\bsessions?\b", re.IGNORECASE)),
    ("round", re.compile(r"\bround \d", re.IGNORECASE)),
    ("dated evidence folder", re.compile(r"docs/validation/|benchmarks/results/")),
    ("commit hash", re.compile(r"(?<![.\w])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w.])")),
]
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
#: files whose dates are data: the records' README and the tables of the benchmark and validation docs
DATES_IN_TABLES = {"BENCHMARKS.md", "docs/validation.md", "docs/validate.md", "docs/traffic.md"}
DATES_ANYWHERE = {"data/records/README.md"}
#: a kernel fit's provenance (`date = "..."` in a spec's [fit] table) is data: when the fit was made
FIT_DATE = re.compile(r'^date = "20\d\d-\d\d-\d\d"$')
#: this test spells out the text it forbids
SKIPPED = {"tests/test_no_diary.py"}
#: (file, pattern name) pairs that are not diary text
ALLOWED = {
    ("benchmarks/probe_placement.py", "round"),  # "round 1": the first wave of blocks a launch places
}


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [p for p in out.stdout.splitlines()
            if Path(p).suffix in SUFFIXES and p not in SKIPPED and (ROOT / p).is_file()]  # fmt: skip


def hits(path: str, text: str) -> list[str]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for name, pat in PATTERNS:
            if (path, name) not in ALLOWED and pat.search(line):
                found.append(f"{path}:{n}: {name}: {line.strip()[:120]}")
        table_row = line.lstrip().startswith("|")
        fit_date = path.startswith(("gpu_specs/", "data/records/")) and FIT_DATE.match(line.strip())
        if DATE.search(line) and path not in DATES_ANYWHERE and not (path in DATES_IN_TABLES and table_row) \
                and not fit_date:
            found.append(f"{path}:{n}: date: {line.strip()[:120]}")
    return found


def test_no_diary_text_in_tracked_files():
    found = [h for p in tracked() for h in hits(p, (ROOT / p).read_text(errors="replace"))]
    assert not found, "diary text (see tests/test_no_diary.py):\n" + "\n".join(found[:60]) + f"\n({len(found)} hits)"


@pytest.mark.parametrize(
    ("line", "caught"),
    [
        ("fitted in the twenty-fourth session", True),
        ("scored on s24 (out of sample)", True),
        ("from the values of commit 3fcfe25", True),
        ("see docs/validation/ncu-2026-11-24-s29", True),
        ("measured 2026-11-24", True),
        ("refitted in round 2", True),
        ("fitted on data/records/h100/fit, see data/records/README.md", False),
        ("smem 0xffffffff, 1.2345678e30f and 3.6800000816583632e-06", False),
        ("tile 8x28/f16/c8/t256", False),
    ],
)
def test_patterns_catch_diary_text_and_spare_reference_text(line, caught):
    assert bool(hits("fuseplanner/x.py", line)) is caught
