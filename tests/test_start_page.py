"""The start page (workbench/start/): the catalog of bundled experiments against README.md
and presets/, its cards' Open and Run, recent runs; Help's docs browser, shortcut list and
About box. GUI tests click the real widgets; Run launches tests/stand_in_engine.py."""

from __future__ import annotations

import doctest
import importlib
import re
import sys
from pathlib import Path

import PySide6
import pytest
import yaml
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QAction, QTextCursor
from PySide6.QtWidgets import QLabel

from window_fixtures import make_window, stand_in  # noqa: F401 (fixtures)
from workbench_helpers import write_run

from workbench import app
from workbench.runs.process import LAUNCH_PRESET, workbench_dir
from workbench.settings import bundled_presets
from workbench.start.about import AboutBox, package_version
from workbench.start.catalog import CatalogError, load_catalog, missing_entries
from workbench.start.help_browser import HelpBrowser, doc_title
from workbench.window.names import DISCARD, SETUP

ROOT = Path(__file__).resolve().parents[1]


def readme_measurements(text: str) -> dict[str, tuple[float, float, float]]:
    """preset -> (start %, end %, seconds) from README.md's table rows that name a preset
    file and give a time: the "Bundled experiments: measured" table and the RLHF
    pipeline's (rows of `--set ...` variants name no file and are left out)."""
    found = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        preset = next((m.group(1) for c in cells if (m := re.match(r"`([\w-]+)\.yaml`", c))), None)
        seconds = [float(m.group(1)) for c in cells if (m := re.fullmatch(r"(\d+(?:\.\d+)?) s", c))]
        if preset is None or not seconds:
            continue
        percents = [float(p) for c in cells for p in re.findall(r"(\d+(?:\.\d+)?)%", c)]
        assert len(percents) >= 2 and preset not in found, line
        found[preset] = (percents[0], percents[1], seconds[0])
    return found


def test_readme_rows_agree_with_the_catalog_and_every_bundled_preset_has_a_card():
    catalog = load_catalog()
    measured = readme_measurements((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(measured) == 16  # the twelve of the measured table and the pipeline's four
    in_catalog = {name: (e.start, e.end, e.cpu_seconds) for name, e in catalog.entries.items()}
    assert in_catalog == measured, {n: (in_catalog.get(n), measured.get(n)) for n in in_catalog.keys() | measured
                                    if in_catalog.get(n) != measured.get(n)}
    assert missing_entries(catalog, bundled_presets()) == []
    assert set(catalog.entries) == {p.stem for p in bundled_presets()}  # no card for a preset that is gone
    assert {e.group for e in catalog.entries.values()} == {g.key for g in catalog.groups}  # no empty group
    assert [e.preset for e in catalog.in_group("rlhf")] == ["sft-sort", "rm-sort", "ppo-sort-rm", "grpo-sort-rm"]


def test_a_catalog_with_a_wrong_field_says_which(tmp_path):
    data = yaml.load((ROOT / "presets" / "catalog.yml").read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    data["presets"]["grpo-sort"]["result"]["end"] = "55.5%"
    del data["presets"]["dpo-sort"]["look_at"]
    path = tmp_path / "catalog.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(CatalogError) as raised:
        load_catalog(path)
    assert sorted(raised.value.problems) == ["presets.dpo-sort: missing look_at",
                                             "presets.grpo-sort.result.end: expected a number, got '55.5%'"]
    path.write_text("groups: [", encoding="utf-8")
    with pytest.raises(CatalogError, match="is not YAML"):
        load_catalog(path)


@pytest.mark.parametrize("name", ["workbench.start.catalog", "workbench.start.controller",
                                  "workbench.start.help_browser", "workbench.start.about",
                                  "workbench.start.shortcuts", "workbench.window.pipeline"])
def test_docstring_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# ------------------------------------------------------------------ the window


def test_plain_rl_workbench_starts_on_the_start_page_and_open_loads_a_card(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    older = write_run(tmp_path / "runs", "grpo-sort-20260101-000000", start=1_700_000_000)
    newer = write_run(tmp_path / "runs", "ppo-sort-20260102-000000", start=1_700_100_000)
    window = app.create_window(["--runs", str(tmp_path / "runs")])
    qtbot.addWidget(window)
    window.ask = lambda *a: DISCARD
    start = window.start.page
    assert window.tabs.currentWidget() is start
    window.resize(1024, 700)
    qtbot.waitExposed(window)
    assert window.minimumSizeHint().width() <= 1024  # the start page (and every tab) fits a 1024 px screen

    runs = [start.recent_runs.item(i).data(Qt.UserRole) for i in range(start.recent_runs.count())]
    assert runs == [str(newer), str(older)]  # newest first
    card = start.cards["grpo-arithmetic"]
    assert "26.5% → 32.0% (+5.5 points) in 42 s" in card.findChild(QLabel, "result").text()
    qtbot.mouseClick(card.open_button, Qt.LeftButton)
    assert window.tabs.currentIndex() == SETUP
    assert window.doc.get("name") == "grpo-arithmetic" and window.doc.path is None  # an untitled copy

    help_menu = window.start.menu
    assert [a.text() for a in help_menu.actions()][0] == "Start page"
    window.start.act_start.trigger()  # Help ▸ Start page
    assert window.tabs.currentWidget() is start
    item = start.recent_runs.item(1)
    start.recent_runs.setCurrentItem(item)
    qtbot.keyClick(start.recent_runs, Qt.Key_Return)  # opens the run, as the Runs list's Open
    assert window.shown and window.shown[0].run_dir == older.resolve()
    assert window.doc.get("name") == "grpo-sort-20260101-000000"  # and a copy of its preset in Set-up

    window.start.act_shortcuts.trigger()  # Help ▸ Keyboard shortcuts
    shortcuts = window.start._shortcuts
    rows = {tuple(shortcuts.table.item(r, c).text() for c in range(3)) for r in range(shortcuts.table.rowCount())}
    assert ("Run", "Ctrl+R", "Run") in rows and ("Documentation", "F1", "Help") in rows
    extra = QAction("Compare runs", window)  # a new action's shortcut is listed without being typed there
    extra.setShortcut("Ctrl+Shift+K")
    window.menuBar().actions()[0].menu().addAction(extra)
    shortcuts.refresh()
    assert ("Compare runs", "Ctrl+Shift+K", "File") in {
        tuple(shortcuts.table.item(r, c).text() for c in range(3)) for r in range(shortcuts.table.rowCount())}


def test_run_on_a_card_launches_that_preset_as_the_run_button_does(make_window, stand_in, qtbot):  # noqa: F811
    window = make_window()
    window.start.show_page()
    card = window.start.page.cards["dpo-sort"]
    with qtbot.waitSignal(window.run_launched, timeout=30_000) as launched:
        qtbot.mouseClick(card.run_button, Qt.LeftButton)
    run_dir = launched.args[0]
    assert run_dir.name.startswith("dpo-sort-")
    launch = yaml.safe_load((workbench_dir(run_dir) / LAUNCH_PRESET).read_text(encoding="utf-8"))
    bundled = yaml.safe_load((ROOT / "presets" / "dpo-sort.yaml").read_text(encoding="utf-8"))
    assert launch["name"] == "dpo-sort" and launch["algorithm"]["name"] == bundled["algorithm"]["name"] == "dpo"
    assert launch["training"]["max_steps"] == bundled["training"]["max_steps"]
    assert not card.run_button.isEnabled()  # as the toolbar's Run, while the run is in progress


def test_the_help_browser_shows_a_doc_and_follows_a_link_to_another(qtbot):
    help_ = HelpBrowser()  # what Help ▸ Documentation opens
    qtbot.addWidget(help_)
    help_.show()
    assert help_.current == ROOT / "README.md" and help_.index.count() == 1 + len(list((ROOT / "docs").glob("*.md")))
    browser = help_.browser
    document = browser.document()
    assert document.toPlainText().startswith("RL Workbench")  # markdown rendered: no "#"

    # click the first link to docs/update-effect.md (a short doc: a long one takes seconds to lay out)
    found = document.find("docs/update-effect.md")
    while not found.isNull() and "update-effect.md" not in found.charFormat().anchorHref():
        found = document.find("docs/update-effect.md", found)
    assert not found.isNull()
    cursor = QTextCursor(document)
    cursor.setPosition(found.selectionStart() + 2)
    browser.setTextCursor(cursor)
    browser.ensureCursorVisible()
    point = browser.cursorRect(cursor).center()
    qtbot.mouseClick(browser.viewport(), Qt.LeftButton, pos=QPoint(point.x(), point.y()))
    qtbot.waitUntil(lambda: help_.current == ROOT / "docs" / "update-effect.md", timeout=5000)
    assert help_.index.currentItem().text() == doc_title(ROOT / "docs" / "update-effect.md") and help_.back.isEnabled()
    qtbot.mouseClick(help_.back, Qt.LeftButton)
    assert help_.current == ROOT / "README.md" and help_.index.currentRow() == 0


def test_the_about_box_names_the_versions_and_what_torch_says_of_the_gpu(qtbot):
    fake_torch = [sys.executable, "-c", 'print(\'{"cuda": true, "devices": ["Test GPU"], "cuda_build": "12.4", '
                                        '"mps": false}\')']
    about = AboutBox(probe=fake_torch)
    qtbot.addWidget(about)
    text = about.text.text()
    for name in ("RL Workbench", "Python", "Qt", "PySide6", "pyqtgraph", "torch", "transformers", "peft"):
        assert f"<b>{name}</b>" in text
    assert package_version("torch") in text and PySide6.__version__ in text and "checking" in about.gpu
    qtbot.waitUntil(lambda: "Test GPU" in about.text.text(), timeout=10_000)
    assert about.gpu == "yes: 1 CUDA GPU (Test GPU), torch built for CUDA 12.4; runs with device auto use it"


def _stage_run(runs: Path, name: str, preset: str, checkpoint: bool) -> Path:
    """A run of `preset` in the runs folder, with a complete checkpoint or none yet."""
    run_dir = write_run(runs, name, steps=3)
    data = yaml.safe_load((run_dir / "preset.yaml").read_text(encoding="utf-8"))
    (run_dir / "preset.yaml").write_text(yaml.safe_dump(dict(data, name=preset)), encoding="utf-8")
    if checkpoint:
        (run_dir / "checkpoints" / "step_000003").mkdir(parents=True)
        (run_dir / "checkpoints" / "step_000003" / "state.json").write_text("{}", encoding="utf-8")
    return run_dir


def test_run_on_a_later_pipeline_stage_says_which_stage_runs_first_and_offers_it(  # noqa: F811
        make_window, stand_in, qtbot, tmp_path):
    """ppo-sort-rm names run:sft-sort and run:rm-sort: with neither in the runs folder its
    card's Run launches nothing (the engine would refuse it after launch) and asks, naming
    both stages in order; Cancel leaves it, Open sft-sort loads that preset, Run sft-sort
    starts it. rm-sort, once an sft-sort run has a checkpoint, runs without a question."""
    window = make_window()
    runs = tmp_path / "runs"
    asked: list[tuple[str, str, list[str]]] = []
    answers: list[str] = []
    window.ask = lambda title, text, choices: asked.append((title, text, choices)) or answers.pop(0)
    launched: list[Path] = []
    window.run_launched.connect(launched.append)
    window.start.show_page()
    cards = window.start.page.cards

    answers.append("Cancel")
    qtbot.mouseClick(cards["ppo-sort-rm"].run_button, Qt.LeftButton)
    title, text, choices = asked[-1]
    assert title == "Run sft-sort first" and choices == ["Run sft-sort", "Open sft-sort", "Cancel"]
    assert "model.start_from: run:sft-sort" in text and "rewards.0.options.model: run:rm-sort" in text
    assert "sft-sort → rm-sort → ppo-sort-rm" in text and str(runs) in text
    assert "ppo-sort-rm needs a run of sft-sort first" in window.run_message.text()
    assert not launched and not any(runs.glob("ppo-sort-rm-*"))  # nothing launched, no failed run folder

    answers.append("Open sft-sort")
    qtbot.mouseClick(cards["grpo-sort-rm"].run_button, Qt.LeftButton)
    assert asked[-1][0] == "Run sft-sort first" and window.tabs.currentIndex() == SETUP
    assert window.doc.get("name") == "sft-sort" and not launched

    # An sft-sort run still without a checkpoint: named, and still the stage to wait for.
    waiting = _stage_run(runs, "sft-sort-20260101-000000", "sft-sort", checkpoint=False)
    answers.append("Cancel")
    qtbot.mouseClick(cards["rm-sort"].run_button, Qt.LeftButton)
    assert f"{waiting.name} has no complete checkpoint yet" in asked[-1][1]

    answers.append("Run sft-sort")
    with qtbot.waitSignal(window.run_launched, timeout=30_000) as started:
        qtbot.mouseClick(cards["rm-sort"].run_button, Qt.LeftButton)
    assert started.args[0].name.startswith("sft-sort-")
    window.run_control.engine.popen.kill()
    qtbot.waitUntil(lambda: window.run_control.act_run.isEnabled(), timeout=30_000)

    _stage_run(runs, "sft-sort-20260102-000000", "sft-sort", checkpoint=True)
    count = len(asked)
    with qtbot.waitSignal(window.run_launched, timeout=30_000) as started:
        qtbot.mouseClick(cards["rm-sort"].run_button, Qt.LeftButton)
    assert started.args[0].name.startswith("rm-sort-") and len(asked) == count  # no question


def test_the_toolbars_run_on_a_later_stage_refuses_with_the_stage_to_run_first(  # noqa: F811
        make_window, stand_in, qtbot, tmp_path):
    """ppo-sort-rm opened in Set-up with an empty runs folder: the toolbar's Run launches
    nothing (no failed run folder) and says, on the field, which run is missing and the
    order of the stages."""
    window = make_window()
    runs = tmp_path / "runs"
    launched: list[Path] = []
    window.run_launched.connect(launched.append)
    window.start.open_preset(ROOT / "presets" / "ppo-sort-rm.yaml")
    assert window.doc.get("name") == "ppo-sort-rm"
    window.run_control.act_run.trigger()
    message = window.run_message.text()
    assert "model.start_from" in message and "run:sft-sort: no sft-sort run with a complete checkpoint" in message
    assert "sft-sort → rm-sort → ppo-sort-rm" in message
    assert not launched and not any(runs.glob("ppo-sort-rm-*")) and window.tabs.currentIndex() == SETUP
