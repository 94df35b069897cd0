"""Tuning a plan on the GPU (`validation.tune`): the groups measured no faster fused are left out and the
model is planned again. CPU only: real plans and programs compiled for the CPU, step times fed in."""

from __future__ import annotations

import pytest

from fuseplanner.cli.main import main
from fuseplanner.core.errors import PlanError
from fuseplanner.frontend.load import load_model
from fuseplanner.hw.spec import gpu
from fuseplanner.planning.search import kernel_key, plan
from fuseplanner.run.compiled import compile as compile_model
from fuseplanner.run.device import StepTime
from fuseplanner.run.program import KernelStep
from fuseplanner.validation.tune import Verdict, tune

MODEL = "mobilenet_v2"


class Timed:
    """A CPU-compiled model whose graph-mode step times are given: a fused step takes `fused(label)`
    seconds, every other step 1 us."""

    def __init__(self, compiled, fused):
        self.compiled, self.fused = compiled, fused
        self.steps, self.plan, self.program = compiled.steps, compiled.plan, compiled.program
        self.asked: list[tuple[int, str]] = []

    def time_nodes(self, repeats: int = 20, mode: str = "stream"):
        self.asked.append((repeats, mode))
        groups = {"+".join(g.nodes) for g in self.plan.groups}
        return [StepTime(s.label, s.kind, s.op_type, self.fused(s.label) if s.label in groups else 1e-6)
                for s in self.steps if s.kind != "view"]  # fmt: skip


def _build(fused, **kw):
    return Timed(compile_model(MODEL, "h100", device="cpu", context="isolated", **kw), fused)


def _members(label: str) -> int:
    return label.count("+") + 1


@pytest.fixture(scope="module")
def first_and_unfused():
    # the isolated context's plan fuses enough PW->DW->PW blocks to drop some and keep others
    return (compile_model(MODEL, "h100", device="cpu", context="isolated"),
            compile_model(MODEL, "h100", device="cpu", fuse=False))


def _keys(compiled, labels) -> set:
    return {kernel_key(s.kind, s.ops, None) for s in compiled.program.steps
            if isinstance(s, KernelStep) and s.label in labels}  # fmt: skip


def test_groups_measured_slower_are_dropped_and_replanned(first_and_unfused):
    first, unfused = first_and_unfused
    pw_dw_pw = [("+".join(g.nodes)) for g in first.plan.groups if g.kind == "pw_dw_pw"]
    assert len(pw_dw_pw) >= 3
    slow = set(pw_dw_pw[:2])
    # a slow group takes 1 us per member more than its unfused layers (1 us each); the others half as long
    fused = lambda label: (2.0 if label in slow else 0.5) * _members(label) * 1e-6  # noqa: E731
    built = []

    def rebuild(excluded):
        built.append(excluded)
        return _build(fused, exclude=excluded)

    out, tuning = tune(Timed(first, fused), Timed(unfused, fused), rebuild, rounds=3, repeats=7)
    r1 = [v for v in tuning.verdicts if v.round == 1]
    assert {v.label for v in r1} == {"+".join(g.nodes) for g in first.plan.groups}
    assert {v.label for v in r1 if not v.kept} == slow
    for v in r1:  # each group's measured seconds: its members unfused at 1 us each, fused as fed in
        assert v.unfused_s == pytest.approx(_members(v.label) * 1e-6)
        assert v.fused_s == pytest.approx(fused(v.label))
    # every tile of the slow groups' kernels is excluded, and only those
    assert tuning.excluded == _keys(first, slow) and all(k[2] is None for k in tuning.excluded)
    assert built[0] == frozenset(tuning.excluded)
    # the tuned plan fuses no kernel of the slow groups' kinds and shapes; the re-plan's groups were
    # measured in the second pass, which dropped nothing (no other group is slow), so tuning stopped
    assert not _keys(out, {"+".join(g.nodes) for g in out.plan.groups}) & tuning.excluded
    assert tuning.rounds == 2 and len(built) == 1 and not tuning.unmeasured
    assert {v.label for v in tuning.verdicts if v.round == 2} == {"+".join(g.nodes) for g in out.plan.groups}
    assert any("left out whatever their tile" in w for w in out.plan.warnings)


def test_nothing_slower_keeps_the_plan_after_one_round(first_and_unfused):
    first, unfused = first_and_unfused
    timed = Timed(first, lambda label: 0.5e-6)
    out, tuning = tune(timed, Timed(unfused, lambda label: 0.5e-6), lambda ex: pytest.fail("re-planned"), repeats=5)
    assert out is timed and tuning.rounds == 1 and not tuning.excluded and not tuning.dropped
    assert timed.asked == [(5, "graph")]


def test_last_round_replan_is_reported_unmeasured(first_and_unfused):
    first, unfused = first_and_unfused
    slow = {"+".join(g.nodes) for g in first.plan.groups if g.kind == "pw_dw_pw"}
    fused = lambda label: (3.0 if label in slow else 0.5) * _members(label) * 1e-6  # noqa: E731
    out, tuning = tune(Timed(first, fused), Timed(unfused, fused), lambda ex: _build(fused, exclude=ex), rounds=1)
    final = {"+".join(g.nodes) for g in out.plan.groups}
    seen = {v.label for v in tuning.verdicts}
    assert tuning.rounds == 1 and set(tuning.unmeasured) == final - seen
    assert tuning.unmeasured  # the nodes given up are fused in other groups, which no round measured


def test_verdict_saving_and_unmeasured_groups_stay():
    assert Verdict(1, "a+b", "pw_dw", "t", fused_s=2e-6, unfused_s=3e-6).saving_s == pytest.approx(1e-6)
    assert not Verdict(1, "a+b", "pw_dw", "t", fused_s=3e-6, unfused_s=3e-6).kept  # a tie gains nothing
    assert Verdict(1, "a+b", "pw_dw", "t", measured=False).kept


def test_bad_rounds_and_exclusions_with_a_plan_are_refused(first_and_unfused):
    first, unfused = first_and_unfused
    with pytest.raises(PlanError, match="at least one round"):
        tune(first, unfused, lambda ex: first, rounds=0)
    with pytest.raises(PlanError, match="without a plan"):
        compile_model(MODEL, "h100", first.plan, device="cpu", exclude={("pw_dw", (), None)})


def test_planner_leaves_out_every_tile_of_an_excluded_group():
    g = load_model(MODEL, None, 1)
    base = plan(g, gpu("h100"), workers=1)
    first = base.groups[0]
    key = kernel_key(first.kind, tuple(g.op(n) for n in first.nodes), None)
    again = plan(g, gpu("h100"), workers=1, exclude={key})
    assert all(kernel_key(x.kind, tuple(g.op(n) for n in x.nodes), None) != key for x in again.groups)
    assert first.nodes not in [x.nodes for x in again.groups]
    assert any("left out whatever their tile" in w for w in again.warnings)
    assert not any("spilled" in w for w in again.warnings)


@pytest.mark.parametrize("extra", [["--device", "cpu"], ["--no-fuse"], ["--plan", "p.json"]])
def test_cli_tune_refuses_what_it_cannot_do(extra, capsys):
    assert main(["run", MODEL, "--tune", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "--tune" in err[0]


def test_cli_save_plan_writes_the_plan_run(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["run", MODEL, "--device", "cpu", "--save-plan", str(out)]) == 0
    from fuseplanner.run.compiled import load_plan

    saved = load_plan(str(out))
    first = compile_model(MODEL, "h100", device="cpu").plan
    assert saved.model and saved.context == first.context == "graph" and len(saved.groups) == len(first.groups)
    # --context isolated plans as `plan --context isolated` (and `compile(context="isolated")`) does
    assert main(["run", MODEL, "--device", "cpu", "--context", "isolated", "--save-plan", str(out)]) == 0
    iso = load_plan(str(out))
    assert iso.context == "isolated" and iso.tiles() == compile_model(MODEL, "h100", device="cpu", context="isolated").plan.tiles()
    assert iso.tiles() != saved.tiles()  # MobileNetV2 on the h100: the contexts fuse different groups
    assert main(["run", MODEL, "--device", "cpu", "--save-plan", str(tmp_path / "no" / "p.json")]) == 2
    with pytest.raises(PlanError, match="context"):
        compile_model(MODEL, "h100", device="cpu", context="warm")


class Benched:
    """A model whose whole-replay medians are fed in, one per call, in order."""

    def __init__(self, medians):
        self.medians, self.calls = list(medians), 0

    def bench(self, replays, cold_l2=False):
        assert not cold_l2
        self.calls += 1
        return type("R", (), {"median_s": self.medians.pop(0)})()


def test_fastest_interleaves_rounds_and_benches_a_shared_model_once():
    from fuseplanner.validation.tune import fastest

    a, b = Benched([3.0, 1.0, 2.0]), Benched([2.5, 2.5, 9.0])
    lat = fastest({"tuned": a, "first plan": a, "unfused": b}, replays=10, rounds=3)
    # medians over rounds: a's 3, 1, 2 -> 2; b's 2.5, 2.5, 9 -> 2.5; "first plan" is "tuned", benched once
    assert lat == {"tuned": 2.0, "first plan": 2.0, "unfused": 2.5}
    assert a.calls == 3 and b.calls == 3


def test_cli_tuning_report_names_each_verdict_and_the_model_run(capsys):
    from types import SimpleNamespace

    from fuseplanner.cli.cmd_run import _tuning_report
    from fuseplanner.validation.tune import Tuned, Tuning

    def model(groups):
        return SimpleNamespace(plan=SimpleNamespace(groups=[None] * groups))

    t = Tuning(verdicts=[Verdict(1, "a+b", "pw_dw", "4x4/f32/c8/t256", 9e-6, 8e-6),
                         Verdict(1, "c+d", "dw_pw", "2x8/f64/c16/t256", 7e-6, 8e-6),
                         Verdict(1, "e+f", "pw_pw", "1x1/f64/c8/t64", measured=False)], rounds=2)  # fmt: skip
    tuned = Tuned(model(0), "unfused", model(2), model(3), model(0), t,
                  {"tuned": 3e-4, "first plan": 3.1e-4, "unfused": 2.9e-4})  # fmt: skip
    _tuning_report(tuned)
    out = capsys.readouterr().out
    assert "saves   -1.00 us  dropped  a+b" in out and "saves   +1.00 us  kept     c+d" in out
    assert "not measured" in out and "e+f" in out
    assert "tuned plan: 2 groups (first plan 3); 1 dropped" in out
    assert "tuned 300.0 us, first plan 310.0 us, unfused 290.0 us; running the unfused (0 groups)" in out
