"""What the window shows of the step's update, token by token (issue 28): a record's
`logprob_after` and `logprob_change` (GRPO and PPO at the top of the record, DPO in each
side) in the inspector, and the `update/*` metrics' declared plots on the dashboard.

A run directory is written by hand (events.jsonl and trajectories/, with the engine's
own writers) and opened in the inspector or the dashboard (pytest-qt, offscreen). The
numbers are chosen so every check is worked out by hand: a completion of four tokens
whose probabilities go 0.5 -> 0.6, 0.2 -> 0.1, 0.9 -> 0.9 and 0.1 -> 0.3 under the update,
so Δ log p = ln 1.2, ln 0.5, 0, ln 3 and Δ p = +0.1, -0.1, 0, +0.2.
"""

from __future__ import annotations

import doctest
import html
import importlib
import math
import re
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest

from engine.run import rundir
from inspector_helpers import dpo_record, grpo_record, ppo_record, write_steps
from workbench.dashboard.view import Dashboard
from workbench.dashboard.plotspec import choose_plots, metric_help
from workbench.inspector.view import GROUP_PAGE
from workbench.inspector.colors import DIVERGING_STOPS, diverging_hex, lut_indices
from workbench.inspector.export import export_html
from workbench.inspector.records import Trajectory
from workbench.inspector.update_effect import against, effect_text, push_sign
from workbench.runs.rundata import RunData
from window_fixtures import inspector, open_run  # noqa: F401 (fixtures)

BEFORE = [0.5, 0.2, 0.9, 0.1]
AFTER = [0.6, 0.1, 0.9, 0.3]
CHANGE = [math.log(a / b) for a, b in zip(AFTER, BEFORE)]  # +0.1823, -0.6931, 0, +1.0986
PROB_CHANGE = [0.1, -0.1, 0.0, 0.2]
GROUP_RECORDS = {"layout": "group", "token_values": ["advantage", "logprob", "ref_logprob", "kl", "entropy", "ratio",
                                                     "logprob_after", "logprob_change"], "preferred": ["advantage"]}
EFFECT_PLOTS = [
    {"key": "loss", "title": "Loss", "metrics": ["loss"]},
    {"key": "update_effect", "title": "Update effect on tokens",
     "metrics": ["update/against_advantage_ratio", "update/change_top10_share"]},
    {"key": "update_change", "title": "Δ log p by advantage sign",
     "metrics": ["update/change_pos_adv_mean", "update/change_neg_adv_mean"]},
]
UPDATE_METRICS = {"update/change_abs_mean": 0.49, "update/change_top10_share": 0.55,
                  "update/change_pos_adv_mean": 0.15, "update/change_neg_adv_mean": -0.2,
                  "update/against_advantage_ratio": 0.25}


def with_effect(record: dict, before: list[float] = BEFORE, after: list[float] = AFTER) -> dict:
    """The record (or a DPO side) with its tokens' probabilities before and after the update."""
    record.update(logprob=[math.log(p) for p in before], logprob_after=[math.log(p) for p in after],
                  logprob_change=[math.log(a / b) for a, b in zip(after, before)])
    return record


def four_token_record(index: int = 0, advantage: float = 0.5, effect: bool = True) -> dict:
    record = grpo_record(1, index, 0, 1.0, advantage, tokens=[" 1", " 2", " 3", "<eos>"])
    return with_effect(record) if effect else record


def effect_run(folder: Path, records: dict[int, list[dict]], algorithm: str = "grpo", records_decl=None,
               plots=None, metrics: dict | None = None, name: str = "effect") -> Path:
    """A run folder: run_started declaring `plots` and `records_decl`, a metrics event
    per step (with `metrics`), and the trajectory records."""
    run_dir = Path(folder) / name
    run_dir.mkdir(parents=True)
    events = rundir.EventWriter(run_dir)
    preset = {"name": name, "algorithm": {"name": algorithm}, "training": {"max_steps": len(records)}}
    declared = {"plots": plots} if plots is not None else {}
    if records_decl is not None:
        declared["records"] = records_decl
    events.emit("run_started", step=0, preset=preset, algorithm=algorithm, max_steps=len(records),
                model={"name_or_path": "builtin:tiny"}, device="cpu", dtype="float32", num_train=8, num_eval=0,
                **declared)
    for step in records:
        events.emit("metrics", step=step, loss=0.5, reward=0.5, **(metrics or {}))
    events.emit("run_finished", step=max(records), status="done", reason="max_steps reached", checkpoint=None)
    events.close()
    write_steps(run_dir, records)
    return run_dir


def lut_hex(value: float, scale) -> str:
    """The colour the text draws a value in: the scale's table entry (diverging_hex to one step)."""
    colour = scale.table()[int(lut_indices(np.array([value]), scale)[0])]
    assert abs(int(colour[1:3], 16) - int(diverging_hex(value, scale.scale)[1:3], 16)) <= 3
    return colour


def plain(text: str) -> str:
    """Rich text as read: tags gone, entities decoded, runs of spaces one space."""
    return re.sub(r"\s+", " ", html.unescape(re.sub("<[^>]+>", " ", text))).strip()


def quantities(view) -> list[str]:
    return [view.quantity_box.itemData(i) for i in range(view.quantity_box.count())]


def backgrounds(view, side: int = 0) -> list[str]:
    return [c.name() for c in view.sides[side].view.background]


def legend_labels(plot) -> list[str]:
    return [label.text for _, label in plot.legend.items] if plot.legend is not None and plot.legend.isVisible() \
        else []


# ================================================================ the pure parts


def test_the_derived_change_and_the_push_are_worked_out_by_hand():
    t = Trajectory.from_record(four_token_record(), GROUP_RECORDS)
    numbers = t.sides[0].numbers
    assert numbers["logprob_change"] == pytest.approx(CHANGE)
    assert numbers["prob_change"] == pytest.approx(PROB_CHANGE)  # exp(after) - exp(before), by the window
    assert push_sign(t, 0).tolist() == [1.0] * 4
    assert against(numbers["logprob_change"], push_sign(t, 0)).tolist() == [False, True, False, False]
    # What a real run recorded for a near-certain space (log p -1e-5): -1.192e-7, the rounding
    # of two fp32 passes, not a move against the advantage; -2.157e-3 (the digit after it) is.
    assert against(np.array([-1.192e-7, -2.157e-3]), np.array([1.0, 1.0])).tolist() == [False, True]
    # A pair: chosen pushed up, rejected down; an unpaired completion by its label.
    pair = Trajectory.from_record(dpo_record(1, 0))
    assert push_sign(pair, 0)[0] == 1.0 and push_sign(pair, 1)[0] == -1.0
    assert push_sign(Trajectory.from_record(dict(four_token_record(), label=False, advantage=None)), 0)[0] == -1.0
    # (0.1823 - 0.6931 + 0 + 1.0986) / 4 = 0.1469
    assert effect_text(numbers["logprob_change"], push_sign(t, 0)) == \
        "Δ log p mean +0.1469 (-0.6931 to +1.099), 1 of 4 tokens against the advantage"


@pytest.mark.parametrize("name", ["workbench.inspector.update_effect", "workbench.dashboard.plotspec"])
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted and not result.failed


# ================================================================ the Trajectory page


def test_the_change_is_offered_only_when_recorded(inspector, tmp_path):  # noqa: F811
    run_dir = effect_run(tmp_path, {1: [four_token_record(0), four_token_record(1, -0.5)],
                                    2: [four_token_record(0, effect=False)]}, records_decl=GROUP_RECORDS)
    open_run(inspector, run_dir)
    inspector.open_step(1, index=0)
    assert quantities(inspector)[:5] == ["advantage", "logprob_change", "prob_change", "logprob", "logprob_after"]
    assert inspector.key == "advantage"  # the run's preferred quantity stays the first shown
    inspector.open_step(2, index=0)  # no logprob_after: nothing of the update anywhere
    assert not {"logprob_change", "prob_change", "logprob_after"} & set(quantities(inspector))
    assert "update" not in plain(inspector.summary.text())
    assert "Δ" not in plain(inspector.sides[0].view.tooltip_for(1))
    assert inspector.sides[0].view.marks is None
    assert not inspector.plot.item.getAxis("right").isVisible() and legend_labels(inspector.plot) == []


def test_colouring_by_change_is_green_up_pink_down_with_the_legend_in_log_p(inspector, tmp_path):  # noqa: F811
    open_run(inspector, effect_run(tmp_path, {1: [four_token_record()]}, records_decl=GROUP_RECORDS))
    inspector.open_step(1, index=0)
    inspector.set_quantity("logprob_change")
    scale = inspector.scale
    assert (scale.kind, scale.centre) == ("diverging", 0.0)
    assert scale.scale == pytest.approx(math.log(3))  # the largest |Δ log p| of the step
    colours = backgrounds(inspector)
    assert colours[3] == DIVERGING_STOPS[-1]  # ln 3: the darkest green
    assert colours[1] == lut_hex(math.log(0.5), scale)
    red, green = int(colours[1][1:3], 16), int(colours[1][3:5], 16)
    assert red > green  # the pink side of the map
    assert colours[2] == DIVERGING_STOPS[5]  # unchanged: neutral
    assert inspector.legend.name.text() == "<b>change after update (Δ log p)</b>"
    assert "log p after this step's update − log p before" in inspector.legend.plain_text()
    # The probability change: exp(after) - exp(before), on its own symmetric scale (0.2).
    inspector.set_quantity("prob_change")
    assert inspector.scale.scale == pytest.approx(0.2)
    colours = backgrounds(inspector)
    assert colours[3] == DIVERGING_STOPS[-1] and colours[1] == lut_hex(-0.1, inspector.scale)
    assert inspector.legend.name.text() == "<b>probability change (Δ p)</b>"


def test_the_tooltip_gives_before_after_and_both_changes(inspector, tmp_path):  # noqa: F811
    open_run(inspector, effect_run(tmp_path, {1: [four_token_record()]}, records_decl=GROUP_RECORDS))
    inspector.open_step(1, index=0)
    tip = plain(inspector.sides[0].view.tooltip_for(1))  # 0.2 -> 0.1
    assert "log p before → after -1.609 → -2.303" in tip
    assert "Δ log p -0.6931" in tip
    assert "p before → after 0.2 → 0.1" in tip
    assert "Δ p -0.1" in tip
    assert "logprob_after" not in tip and "prob_change" not in tip  # together, not as raw keys
    assert tip.index("probability 0.2") < tip.index("log p before → after")  # after the token's probability
    inspector.select_token(3)
    assert "Δ log p +1.099" in plain(inspector.details.text()) and "Δ p +0.2" in plain(inspector.details.text())


def test_against_the_advantage_is_boxed_and_the_advantage_drawn_beside(inspector, tmp_path):  # noqa: F811
    open_run(inspector, effect_run(tmp_path, {1: [four_token_record(), four_token_record(1, -1.0)]},
                                   records_decl=GROUP_RECORDS))
    inspector.open_step(1, index=0)
    plot = inspector.plot
    inspector.set_quantity("logprob_change")
    assert inspector.sides[0].view.marks == [False, True, False, False]  # fell though pushed up
    xs, ys = plot.clip_marks.getData()
    assert xs.tolist() == [1.0] and ys.tolist() == pytest.approx([math.log(0.5)])
    # The advantage, dashed on a right axis of its own, on the step's symmetric range (±1).
    assert plot.item.getAxis("right").isVisible()
    assert "advantage" in plot.item.getAxis("right").labelText
    x, y = plot.companion.getData()
    assert x.tolist() == [0, 1, 2, 3] and y.tolist() == [0.5] * 4
    assert plot.companion_box.viewRange()[1] == pytest.approx([-1.12, 1.12])  # ±1, padded 6 % each side
    assert legend_labels(plot) == ["change after update (Δ log p)", "advantage (right axis)"]
    # Both axes put 0 at the same height, so a curve's side of the line reads alike on both.
    main_zero = plot.item.getViewBox().mapViewToScene(pg.Point(0, 0)).y()
    assert plot.companion_box.mapViewToScene(pg.Point(0, 0)).y() == pytest.approx(main_zero, abs=1.0)
    assert "update: Δ log p mean +0.1469 (-0.6931 to +1.099), 1 of 4 tokens against the advantage" \
        in plain(inspector.summary.text())
    inspector.open_step(1, index=1)  # advantage -1: the tokens that rose are against it
    assert inspector.sides[0].view.marks == [True, False, False, True]
    inspector.set_quantity("advantage")  # back: no boxes, no second axis, as before
    assert inspector.sides[0].view.marks is None
    assert not plot.item.getAxis("right").isVisible() and legend_labels(plot) == []
    assert plot.clip_marks.getData()[0].size == 0


def test_a_ppo_record_compares_with_its_per_token_advantage(inspector, tmp_path):  # noqa: F811
    record = ppo_record(1, 0, n=4, prompt="sort 5 4 =")
    record = with_effect(record)
    record["advantage"] = [1.0, -1.0, 0.5, -2.0]
    open_run(inspector, effect_run(tmp_path, {1: [record]}, algorithm="ppo"))  # an old run: no declaration
    inspector.open_step(1, index=0)
    inspector.set_quantity("logprob_change")
    assert inspector.sides[0].view.marks == [False, False, False, True]  # ln 3 up against -2
    assert inspector.plot.companion.getData()[1].tolist() == [1.0, -1.0, 0.5, -2.0]
    assert inspector.plot.companion_box.viewRange()[1] == pytest.approx([-2.24, 2.24])


def test_a_dpo_pair_shows_each_sides_change(inspector, tmp_path):  # noqa: F811
    record = dpo_record(1, 0)
    for side in ("chosen", "rejected"):
        n = len(record[side]["tokens"])
        before = [0.5] * n
        after = [0.6 if k % 2 else 0.4 for k in range(n)]  # even tokens fall, odd ones rise
        with_effect(record[side], before, after)
    open_run(inspector, effect_run(tmp_path, {1: [record]}, algorithm="dpo"))
    inspector.open_step(1, index=0)
    assert {"logprob_change", "prob_change"} <= set(quantities(inspector))
    inspector.set_quantity("logprob_change")
    chosen, rejected = inspector.sides[0].view, inspector.sides[1].view
    assert chosen.marks == [k % 2 == 0 for k in range(10)]  # chosen tokens that fell
    assert rejected.marks == [k % 2 == 1 for k in range(14)]  # rejected tokens that rose
    # ln 0.8 is the step's largest |Δ log p|: the darkest pink; ln 1.2 a lighter green.
    assert backgrounds(inspector, 0)[0] == DIVERGING_STOPS[0] == backgrounds(inspector, 1)[0]
    assert backgrounds(inspector, 1)[1] == lut_hex(math.log(1.2), inspector.scale)
    assert inspector.scale.scale == pytest.approx(-math.log(0.8))
    plot = inspector.plot
    assert len(plot.series) == 2 and not plot.item.getAxis("right").isVisible()  # no advantage to draw beside
    assert legend_labels(plot) == ["chosen", "rejected"]
    summary = plain(inspector.summary.text())
    assert "chosen update: Δ log p mean" in summary and "5 of 10 tokens against the push (chosen up)" in summary
    assert "7 of 14 tokens against the push (rejected down)" in summary
    assert "Δ p +0.1" in plain(rejected.tooltip_for(1))


def test_the_group_page_colours_and_boxes_by_change(inspector, tmp_path):  # noqa: F811
    open_run(inspector, effect_run(tmp_path, {1: [four_token_record(0), four_token_record(1, -1.0)]},
                                   records_decl=GROUP_RECORDS))
    inspector.open_step(1, index=0)
    inspector.set_quantity("logprob_change")
    inspector.pages.setCurrentIndex(GROUP_PAGE)
    rows = {row.index: row for row in inspector.group_view.rows}
    assert rows[0].view.marks == [False, True, False, False] and rows[1].view.marks == [True, False, False, True]
    assert [c.name() for c in rows[0].view.background][3] == DIVERGING_STOPS[-1]
    assert "update: Δ log p mean +0.1469 (-0.6931 to +1.099), 1 of 4 tokens against the advantage" \
        in plain(rows[0].header.text())
    assert "Δ log p -0.6931" in plain(rows[0].view.tooltip_for(1))


def test_export_html_boxes_the_tokens_against_the_advantage(inspector, tmp_path):  # noqa: F811
    open_run(inspector, effect_run(tmp_path, {1: [four_token_record()]}, records_decl=GROUP_RECORDS))
    inspector.open_step(1, index=0)
    inspector.set_quantity("logprob_change")
    page = export_html(inspector.current, "logprob_change", inspector.scale)
    assert re.findall(r"class='k( c)?' data-i='(\d)'", page) == [("", "0"), (" c", "1"), ("", "2"), ("", "3")]
    assert "Δ log p -0.6931" in html.unescape(page)


# ================================================================ the dashboard


def test_the_declared_update_plots_draw_with_their_help(qtbot, tmp_path):
    run = RunData(effect_run(tmp_path, {1: [four_token_record()], 2: [four_token_record()]},
                             records_decl=GROUP_RECORDS, plots=EFFECT_PLOTS, metrics=UPDATE_METRICS))
    run.poll()
    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.set_runs([run])
    effect, change = dashboard.plot("update_effect"), dashboard.plot("update_change")
    assert effect is not None and change is not None
    assert [c.spec.metric for c in effect.curves] == ["update/against_advantage_ratio", "update/change_top10_share"]
    # The catalogue adds the mean |Δ log p| (same units) to the declared pair.
    assert [c.spec.metric for c in change.curves] == ["update/change_pos_adv_mean", "update/change_neg_adv_mean",
                                                      "update/change_abs_mean"]
    effect.update_data(0.0)
    assert effect.curves[0].line.getData()[1].tolist() == [0.25, 0.25]
    tip = plain(effect.title.toolTip())
    assert "moved against the advantage (update/against_advantage_ratio): share of the recorded tokens" in tip
    assert "clipping, the KL term and the other completions sharing the weights can cause it" in tip
    assert "top 10 % share of |Δ log p| (update/change_top10_share): share of the total |Δ log p|" in tip
    assert effect.info.toolTip() == effect.title.toolTip() and effect.readout.toolTip() == effect.title.toolTip()
    tip = plain(change.title.toolTip())
    for metric in ("update/change_pos_adv_mean", "update/change_neg_adv_mean", "update/change_abs_mean"):
        assert f"({metric}): " in tip and metric_help(metric)
    layout = choose_plots({"metrics": set(run.metrics.names())}, {"plots": EFFECT_PLOTS})
    assert not [m for m in layout.other if m.startswith("update/")]  # every update metric has its plot


def test_a_run_without_the_update_effect_has_no_such_plots(qtbot, tmp_path):
    run = RunData(effect_run(tmp_path, {1: [four_token_record(effect=False)]}, records_decl=GROUP_RECORDS,
                             plots=EFFECT_PLOTS[:1]))
    run.poll()
    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.set_runs([run])
    assert dashboard.plot("update_effect") is None and dashboard.plot("update_change") is None
    assert dashboard.plot("loss") is not None
    assert metric_help("loss") == ""  # the catalogue says nothing of the loss curve (the engine's plot help does)
