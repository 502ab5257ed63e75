"""The samples table shows the fields a run declares (run_started's `sample_fields`,
docs/run-directory.md): a made-up algorithm's new fields show with no window change, each
by its kind (text, number, flag in its declared words, scores, a kind the window does not
know as compact JSON); a run that declares none (an old run) keeps the known keys' columns."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt

from engine.run import rundir
from window_fixtures import open_samples
from workbench.runs.rundata import RunData
from workbench_helpers import write_run

FIELDS = [
    {"key": "judge_note", "title": "judge's note", "kind": "text", "help": "what the judge wrote"},
    {"key": "margin_x", "title": "margin x", "kind": "number", "help": "the made-up margin"},
    {"key": "approved", "title": "approved", "kind": "flag", "help": "the judge approved", "true": "approved",
     "false": "refused"},
    {"key": "parts", "title": "part", "kind": "scores", "help": "each part's score"},
    {"key": "trace", "title": "trace", "kind": "tree", "help": "a kind no window knows yet"},
]


def made_up_run(tmp_path, fields=FIELDS):
    """A run of a made-up algorithm whose rows carry keys no window knows, and `tie`,
    which it does not declare."""
    run_dir = write_run(tmp_path, "made-up", steps=2, algorithm="judge_po")
    path = run_dir / rundir.EVENTS_FILE
    events = [json.loads(line) for line in path.read_text().splitlines()]
    for event in events:
        if event["type"] == "run_started" and fields is not None:
            event["sample_fields"] = fields
        if event["type"] == "samples":
            for row in event["samples"]:
                i = row["index"]
                row.update(judge_note=f"note {i}\nsecond line", margin_x=0.25 * i, approved=i % 2 == 0,
                           parts={"style": i - 1.5, "facts": 1.0}, trace={"depth": i, "path": [1, 2]}, tie=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return run_dir


def cell(view, row: int, column: str, role=Qt.DisplayRole):
    model = view.model
    return model.data(model.index(row, model.columns.index(column)), role)


def headers(view) -> list[str]:
    return [view.model.headerData(c, Qt.Horizontal) for c in range(view.model.columnCount())]


def row_of(view, index: int, step: int = 2) -> int:
    return next(r for r in range(view.model.rowCount()) if view.model.sample(r).key == (step, index))


def test_declared_fields_of_a_made_up_algorithm_show_with_no_window_change(qtbot, tmp_path):
    view = open_samples(qtbot, made_up_run(tmp_path), rows=lambda count: count == 8)
    assert view.model.columns == ["step", "prompt", "completion", "judge_note", "approved", "reward",
                                  "rewards/exact_match", "margin_x", "advantage", "parts/style", "parts/facts",
                                  "trace"]
    assert headers(view)[3:5] == ["judge's note", "approved"] and "tie" not in headers(view)  # not declared
    assert headers(view)[7] == "margin x" and headers(view)[9:] == ["part: style", "part: facts", "trace"]
    tip = view.model.headerData(view.model.columns.index("margin_x"), Qt.Horizontal, Qt.ToolTipRole)
    assert tip == "the made-up margin"
    row = row_of(view, 3)
    assert cell(view, row, "judge_note") == "note 3⏎second line"
    assert cell(view, row, "judge_note", Qt.ToolTipRole) == "note 3\nsecond line"
    assert cell(view, row, "margin_x") == "0.75" and cell(view, row, "parts/style") == "1.5"
    assert cell(view, row, "approved") == "refused" and cell(view, row_of(view, 2), "approved") == "approved"
    assert cell(view, row, "trace") == '{"depth":3,"path":[1,2]}'

    view.table.sortByColumn(view.model.columns.index("margin_x"), Qt.DescendingOrder)
    assert [view.model.sample(r).index for r in range(4)] == [3, 3, 2, 2]
    view.select_row(row_of(view, 3))
    detail = view.detail.toPlainText()
    assert "Judge's note" in detail and "note 3\nsecond line" in detail
    assert "margin x: 0.75" in detail and "approved refused" in detail and '"depth":3' in detail
    assert "part: style 1.5, facts 1" in detail


def test_the_filter_typed_in_keeps_the_declared_columns(qtbot, tmp_path):
    view = open_samples(qtbot, made_up_run(tmp_path), rows=lambda count: count == 8)
    qtbot.keyClicks(view.search, "sort 2 3")
    qtbot.waitUntil(lambda: view.model.rowCount() == 1, timeout=3000)
    assert cell(view, 0, "judge_note") == "note 3⏎second line" and cell(view, 0, "margin_x") == "0.75"


def test_a_run_declaring_no_fields_keeps_the_known_keys(qtbot, tmp_path):
    """An old run: its rows' known keys make its columns (tie, as before; the keys it
    does not know, none)."""
    view = open_samples(qtbot, made_up_run(tmp_path, fields=None), rows=lambda count: count == 8)
    assert view.model.columns == ["step", "prompt", "completion", "reward", "rewards/exact_match", "advantage",
                                  "tie"]
    assert cell(view, 0, "tie") == "yes"


def test_declared_fields_are_read_again_when_run_started_comes_after_the_rows(tmp_path):
    run = RunData(made_up_run(tmp_path, fields=None))
    run.poll()
    assert len(run.samples) == 8 and not run.samples.has("margin_x")
    from workbench.runs.samples_store import sample_fields_of
    run.samples.set_fields(sample_fields_of({"sample_fields": FIELDS}))
    assert run.samples.has("margin_x") and list(run.samples.numbers("margin_x"))[:4] == [0.0, 0.25, 0.5, 0.75]
    assert len(run.samples) == 8


def test_a_declared_known_key_keeps_its_colours_and_takes_its_declared_words(qtbot, tmp_path):
    """`label` declared as a flag with words of its own: the words show, green/pink as
    before; `rejected` declared as text gets a column (an old run shows it in the pane only)."""
    fields = [{"key": "label", "title": "verdict", "kind": "flag", "help": "kept or dropped", "true": "kept",
               "false": "dropped"},
              {"key": "rejected", "kind": "text", "help": "the other completion"}]
    run_dir = made_up_run(tmp_path, fields=fields)
    path = run_dir / rundir.EVENTS_FILE
    events = [json.loads(line) for line in path.read_text().splitlines()]
    for row in (row for event in events if event["type"] == "samples" for row in event["samples"]):
        row.update(label=row["index"] < 2, rejected=f"other {row['index']}")
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    view = open_samples(qtbot, run_dir, rows=lambda count: count == 8)
    assert view.model.columns[3:5] == ["label", "rejected"]
    assert headers(view)[3:5] == ["verdict", "rejected completion"]
    kept, dropped = row_of(view, 0), row_of(view, 3)
    assert cell(view, kept, "label") == "kept" and cell(view, dropped, "label") == "dropped"
    assert cell(view, kept, "label", Qt.BackgroundRole).name() != cell(view, dropped, "label", Qt.BackgroundRole).name()
    assert cell(view, dropped, "rejected") == "other 3"


def test_rows_without_an_advantage_get_no_column_of_nulls(qtbot, tmp_path):
    """KTO's samples carry no advantage: the table showed a column of 'null' (seen in the
    window on kto-sort); the column comes with the first row that has one."""
    run_dir = write_run(tmp_path, "kto-like", steps=2, algorithm="kto")
    path = run_dir / rundir.EVENTS_FILE
    events = [json.loads(line) for line in path.read_text().splitlines()]
    for event in events:
        for row in event.get("samples", []) if event["type"] == "samples" else []:
            row.pop("advantage", None)
            row["label"] = row["index"] % 2 == 0
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    view = open_samples(qtbot, run_dir, rows=lambda count: count == 8)
    assert "advantage" not in view.model.columns and "label" in view.model.columns
    with_advantage = open_samples(qtbot, made_up_run(tmp_path / "with"), rows=lambda count: count == 8)
    assert "advantage" in with_advantage.model.columns
