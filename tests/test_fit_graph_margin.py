"""The graph context's fuse threshold scored on saved executor decisions (`validation.fit_whole`, step 3
of `calibrate --from-whole`; CPU only, a committed whole run of MobileNetV1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fuseplanner.hw.kernel_fit import GRAPH_THRESHOLD_FIELD
from fuseplanner.hw.spec import gpu
from fuseplanner.validation import fit_whole
from fuseplanner.validation.microbench import apply_measured
from fuseplanner.validation.whole import read
from fuseplanner.validation.whole_decisions import score
from fuseplanner.validation.whole_redecide import redecide

ROOT = Path(__file__).resolve().parents[1]
RUN = str(ROOT / "data" / "records" / "h100" / "whole" / "fp32fp32_b1" / "mobilenet_v1.json.gz")


def with_threshold(spec, value: float):
    return apply_measured(spec, {GRAPH_THRESHOLD_FIELD: value})


def test_threshold_is_set_in_the_fit_only():
    s = with_threshold(gpu("h100"), 1.3)
    assert s.fit.graph_fuse_min_speedup == 1.3 == s.eff("graph_fuse_min_speedup")
    assert s.fit.fuse_min_speedup == gpu("h100").fit.fuse_min_speedup


def test_a_threshold_nothing_reaches_keeps_every_group_unfused():
    """At 4x no MobileNetV1 group is fused in the graph context, so a graph decision is right exactly
    where the isolated plan's (fusing every candidate) is wrong: the two right counts add up to the
    candidates scored."""
    right, scored, lost = fit_whole.graph_scores((RUN, gpu("h100"), (4.0,)))[0]
    decisions = score(redecide(read(RUN)[0], with_threshold(gpu("h100"), 4.0)))
    graph = [d for d in decisions if d.context == "graph" and d.right is not None]
    isolated = [d for d in decisions if d.context == "isolated" and d.right is not None]
    assert not any(d.fuse for d in graph) and all(d.fuse for d in isolated)
    assert scored == len(graph) == len(isolated) > 0
    assert right + sum(d.right for d in isolated) == scored
    assert lost == pytest.approx(sum(d.measured.saving_s for d in graph if not d.right))


def test_scoring_thresholds_together_matches_scoring_each_alone():
    """`graph_scores` shares the tile searches across thresholds (they do not read it): the scores of
    two values scored in one job are those of each scored alone."""
    spec = gpu("h100")
    together = fit_whole.graph_scores((RUN, spec, (0.9, 4.0)))
    alone = [fit_whole.graph_scores((RUN, spec, (v,)))[0] for v in (0.9, 4.0)]
    assert together == alone and together[0] != together[1]
