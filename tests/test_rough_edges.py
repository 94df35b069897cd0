"""CLI rough edges: 80-column tables, tile notation, summary of the paper model, objective-independent
baseline, --from-results without --out, opsets in inspect, gpus --sources, bundled names, batch note."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import onnx
import pytest
from rich.console import Console

from fuseplanner.cli.cmd_inspect import layers_table
from fuseplanner.cli.main import main
from fuseplanner.cli.plan_table import compare_table, print_plan
from fuseplanner.frontend import zoo
from fuseplanner.frontend.load import bundled_models, load_model
from fuseplanner.hw import spec as specs
from fuseplanner.planning.export import summary_line
from fuseplanner.planning.search import plan

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "fixtures" / "results_small.json"
NUMBER = re.compile(r"\d+\.\d+%?|\d+->\d+")


@pytest.fixture(scope="module")
def small_graph():
    return load_model(zoo.mobilenet_v2(width=0.5, resolution=96, name="small_v2"))


@pytest.fixture(scope="module")
def small_plan(small_graph):
    return plan(small_graph, "h100", workers=1)


def _render(renderable_or_fn, width: int = 80) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=width, highlight=False)
    if callable(renderable_or_fn):
        renderable_or_fn(con)
    else:
        con.print(renderable_or_fn)
    return buf.getvalue()


def _table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("small_v2 on h100")]  # the soft-wrapped summary


def test_plan_tables_fit_80_columns_without_cutting_numbers(small_plan):
    text = _render(lambda con: print_plan(small_plan, con))
    assert "…" not in text and max(len(line) for line in _table_lines(text)) <= 80
    for g in small_plan.groups:
        assert str(g.tile) in text and f"{g.fused.time_s * 1e6:.2f}" in text
    assert "Members of each group" in text and all(g.nodes[0] in text for g in small_plan.groups)
    wide = _render(lambda con: print_plan(small_plan, con), width=160)
    assert "Members of each group" not in wide  # wide consoles keep the members in the groups table


def test_compare_table_fits_80_columns(small_graph):
    plans = [plan(small_graph, g, workers=1) for g in ("h100", "a100_80gb", "gtx1660", "orin")]
    text = _render(compare_table(plans))
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    for p in plans:
        assert f"{p.totals.unfused.time_s * 1e6:.2f}" in text and f"{p.totals.planned.time_s * 1e6:.2f}" in text


@pytest.mark.parametrize("model", ["mobilevit_xxs", "efficientnet_b0"])
def test_inspect_table_fits_80_columns(model):
    graph = load_model(model)
    text = _render(layers_table(graph, None, 80))
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    for op in graph.ops():
        if op.is_conv:
            assert "x".join(map(str, op.output_shapes[0])) in text
    wide = _render(layers_table(graph, None, 200), width=200)
    assert " FLOPs " in wide and " FLOPs " not in text


def test_tile_notation_is_explained(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "8x28/f16/c8/t256" in help_text and "chunks of 8" in help_text and "256 threads" in help_text
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "`8x28/f16/c8/t256` reads" in readme and "chunks of 8" in readme


def test_summary_line_names_the_paper_model(small_graph, small_plan):
    paper = plan(small_graph, "h100", model="paper", workers=1)
    assert "cost model paper" in summary_line(paper)
    assert "cost model" not in summary_line(small_plan)


def test_baseline_does_not_change_with_the_objective(small_graph, small_plan):
    base = small_plan.totals.unfused
    for objective in ("gma", "dram"):
        other = plan(small_graph, "h100", objective=objective, workers=1).totals.unfused
        assert (other.time_s, other.gma_bytes, other.dram_bytes, other.launches) == (
            base.time_s, base.gma_bytes, base.dram_bytes, base.launches)


def test_from_results_without_out_keeps_the_results(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    results = run / "results.json"
    shutil.copy(RESULTS, results)
    before = results.read_bytes()
    assert main(["validate", "--from-results", str(results), "--json"]) == 0
    capsys.readouterr()
    assert results.read_bytes() == before
    assert (run / "report.md").is_file()


def test_inspect_shows_declared_and_upgraded_opset(capsys):
    args = ["inspect", "mobilenet_v1_converter_op11", "--input-shape", "input=1x3x224x224"]
    assert main(args) == 0
    assert "opset 11, upgraded to 18" in " ".join(capsys.readouterr().out.split())
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["source_opset"], doc["opset"]) == (11, 18)
    assert main(["inspect", "mobilenet_v2"]) == 0
    out = capsys.readouterr().out
    assert "opset 18;" in out and "upgraded" not in out


def test_gpus_sources_prints_the_sources(capsys):
    assert main(["gpus", "h100", "--sources"]) == 0
    out = capsys.readouterr().out
    spec = specs.gpu("h100")
    field, source = sorted(dict(spec.sources).items())[0]
    assert f"{field}: {source}" in out
    assert main(["gpus", "h100"]) == 0
    assert f"{field}: {source}" not in capsys.readouterr().out


def test_readme_lists_exactly_the_bundled_models():
    readme = (ROOT / "README.md").read_text()
    paragraph = readme[readme.index("`MODEL` is an ONNX file or a bundled model name"):]
    paragraph = paragraph[: paragraph.index("see `models/README.md`")]
    assert re.findall(r"`([a-z0-9_]+)`", paragraph) == bundled_models()


def test_dynamic_batch_set_to_one_prints_one_note(tmp_path, capsys):
    model = zoo.mobilenet_v1(width=0.25, resolution=32, num_classes=10)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "dyn.onnx"
    onnx.save(model, path)
    assert main(["plan", str(path), "--gpu", "h100", "--onnx", str(tmp_path / "out.onnx")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    batch_notes = [line for line in notes if "dynamic batch" in line]
    assert len(batch_notes) == 1 and "dynamic batch dim (batch)" in batch_notes[0] and "batch 1" in batch_notes[0]
    assert main(["plan", str(path), "--gpu", "h100", "--batch", "2"]) == 0
    assert not [line for line in capsys.readouterr().err.splitlines() if "dynamic batch" in line]
