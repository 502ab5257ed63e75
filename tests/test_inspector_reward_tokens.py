"""Seeing the reward model (issue 39), in the trajectory inspector (pytest-qt, offscreen):
a reward model's pair side by side, each side headed by its reward, coloured by the score
of each prefix or by its change, under the off-distribution note; an RL run scored by a
reward model (`rm_score`) gets the note only while coloured by it; an SFT demonstration
says it is the data's answer, is coloured by its probability, and its tooltip gives the
token's rank and the model's top alternatives (a record from before `rank`: from its
top-5). The run folders are written by hand, with the records their runs declare."""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pytest
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from inspector_helpers import grpo_record, write_steps
from test_inspector import close, painted
from window_fixtures import inspector, open_run  # noqa: F401 (fixtures)
from workbench_helpers import write_run

NOTE = "Positions before the last token are off-distribution"


def declared_run(folder, name: str, algorithm: str, records: dict, by_step: dict[int, list[dict]]):
    """A run folder whose run_started declares `records` (as today's engine does), with
    these trajectory records."""
    run_dir = write_run(folder, name, steps=max(by_step), algorithm=algorithm)
    events = run_dir / "events.jsonl"
    lines = events.read_text().splitlines()
    started = json.loads(lines[0])
    started["records"] = records
    events.write_text("\n".join([json.dumps(started), *lines[1:]]) + "\n")
    write_steps(run_dir, by_step)
    return run_dir


def rm_side(tokens: list[str], scores: list[float]) -> dict:
    change = [scores[0]] + [b - a for a, b in zip(scores, scores[1:])]
    return {"completion": "".join(tokens), "token_ids": list(range(len(tokens))), "tokens": tokens,
            "score": scores, "score_change": change, "reward": scores[-1]}


RM_RECORDS = {"layout": "pair", "sides": ["chosen", "rejected"], "token_values": ["score", "score_change"],
              "preferred": ["score"]}
# A score that drifts up (change small) and jumps at the last token (change large): colouring by
# the score and by its change must differ.
CHOSEN = rm_side([" ", "1", " ", "2", " ", "3"], [0.4, 0.6, 0.8, 1.0, 1.2, 2.5])
REJECTED = rm_side([" ", "3", " ", "1", " ", "2"], [0.4, -0.2, -0.4, -0.6, -0.8, -1.5])


def pick(qtbot, view, key: str) -> None:
    """Choose `key` in the 'Colour by' box as a user does: click it open, arrow to the
    entry in its list, Enter."""
    box = view.quantity_box
    target = box.findData(key)
    assert target >= 0, key
    qtbot.mouseClick(box, Qt.LeftButton)
    qtbot.waitUntil(lambda: box.view().isVisible(), timeout=2000)
    moves = target - box.view().currentIndex().row()
    for _ in range(abs(moves)):
        qtbot.keyClick(box.view(), Qt.Key_Down if moves > 0 else Qt.Key_Up)
    qtbot.keyClick(box.view(), Qt.Key_Return)
    assert view.key == key


def tooltip(qtbot, text_view, i: int) -> str:
    """The tooltip of token i, as the user sees it on hovering it (plain text)."""
    pos = text_view.token_rect(i).center().toPoint()
    QApplication.sendEvent(text_view.viewport(), QHelpEvent(QEvent.ToolTip, pos, text_view.viewport().mapToGlobal(pos)))
    qtbot.waitUntil(QToolTip.isVisible, timeout=3000)
    tip = re.sub(r"\s+", " ", html.unescape(re.sub("<[^>]+>", " ", QToolTip.text())))
    QToolTip.hideText()
    return tip


def test_a_reward_models_pair_side_by_side_by_score_and_by_its_change(inspector, qtbot, tmp_path):
    run_dir = declared_run(tmp_path, "rm", "reward_model", RM_RECORDS, {1: [
        {"algorithm": "reward_model", "step": 1, "index": 0, "group": 0, "prompt": "sort 3 1 2 =",
         "margin": 4.0, "chosen": CHOSEN, "rejected": REJECTED}]})
    open_run(inspector, run_dir)
    chosen, rejected = inspector.sides
    assert chosen.isVisible() and rejected.isVisible()
    assert chosen.geometry().right() < rejected.geometry().left()  # side by side
    assert "reward <b>2.5</b>" in chosen.header.text() and "reward <b>-1.5</b>" in rejected.header.text()
    # It opens on the prefix score (declared preferred), diverging at 0, under the note.
    assert inspector.key == "score" and inspector.scale.kind == "diverging" and inspector.scale.centre == 0
    note = inspector.legend.note
    assert note.isVisible() and note.text().startswith(NOTE) and "changes its mind" in note.text()
    by_score = [painted(chosen.view, i) for i in range(6)] + [painted(rejected.view, i) for i in range(6)]
    values = np.concatenate(inspector.current.values("score"))
    assert all(close(c, inspector.scale.hex(v)) for c, v in zip(by_score, values))
    pick(qtbot, inspector, "score_change")
    assert note.isVisible() and "score change" in inspector.legend.name.text()
    by_change = [painted(chosen.view, i) for i in range(6)] + [painted(rejected.view, i) for i in range(6)]
    values = np.concatenate(inspector.current.values("score_change"))
    assert all(close(c, inspector.scale.hex(v)) for c, v in zip(by_change, values))
    assert inspector.scale.scale == pytest.approx(1.3)  # the last token's jump, the largest change
    assert sum(not close(a, b) for a, b in zip(by_score, by_change)) >= 6
    # The exported page keeps the note; both values are in a token's tooltip.
    assert NOTE in inspector.export_html_to(tmp_path / "pair.html").read_text(encoding="utf-8")
    tip = tooltip(qtbot, chosen.view, 5)
    assert "score 2.5" in tip and "score_change 1.3" in tip and "chosen token 5" in tip


def test_the_note_follows_a_reward_model_score_in_an_rl_run(inspector, qtbot, tmp_path):
    records = []
    for i in range(2):
        record = grpo_record(1, i, 0, 0.5 * i, 1.0 - 2 * i, n=6)
        scores = [0.1 * k - i for k in range(6)]
        record.update(rm_score=scores, rm_score_change=[scores[0]] + [0.1] * 5)
        records.append(record)
    declared = {"layout": "group", "token_values": ["advantage", "logprob", "rm_score", "rm_score_change"],
                "preferred": ["advantage"]}
    open_run(inspector, declared_run(tmp_path, "grpo-rm", "grpo", declared, {1: records}))
    note = inspector.legend.note
    assert inspector.key == "advantage" and not note.isVisible()
    pick(qtbot, inspector, "rm_score")
    assert note.isVisible() and note.text().startswith(NOTE)
    assert "RM score (prefix)" in inspector.legend.name.text() and inspector.scale.kind == "diverging"
    pick(qtbot, inspector, "rm_score_change")
    assert note.isVisible()
    pick(qtbot, inspector, "advantage")
    assert not note.isVisible()


def sft_record(index: int, rank: bool = True) -> dict:
    """A demonstration of 4 target tokens; token 2 ("2") is the model's third choice."""
    tokens, ids = [" ", "1", "2", "<eos>"], [4, 21, 22, 2]
    top_ids = [[4, 21, 22, 2, 5], [21, 22, 4, 2, 5], [21, 4, 22, 2, 5], [2, 4, 21, 22, 5]]
    names = {4: " ", 21: "1", 22: "2", 2: "<eos>", 5: "x"}
    top_probs = [[0.9, 0.05, 0.02, 0.01, 0.01], [0.8, 0.1, 0.05, 0.03, 0.01], [0.5, 0.3, 0.1, 0.05, 0.02],
                 [0.97, 0.01, 0.01, 0.005, 0.002]]
    probs = [0.9, 0.8, 0.1, 0.97]
    record = {"algorithm": "sft", "step": 1, "index": index, "group": index, "prompt": "sort 2 1 =",
              "completion": " 1 2", "token_ids": ids, "tokens": tokens,
              "logprob": [round(float(np.log(p)), 4) for p in probs], "entropy": [0.3, 0.6, 1.2, 0.1],
              "top_ids": top_ids, "top_tokens": [[names[t] for t in row] for row in top_ids],
              "top_probs": top_probs, "reward": float(np.mean(np.log(probs)))}
    if rank:
        record["rank"] = [1, 1, 3, 1]
    return record


SFT_RECORDS = {"layout": "single", "token_values": ["logprob", "entropy", "rank"],
               "preferred": ["probability", "logprob"], "demonstration": True}


def test_a_demonstration_by_probability_with_its_rank_and_the_models_alternatives(inspector, qtbot, tmp_path):
    open_run(inspector, declared_run(tmp_path, "sft", "sft", SFT_RECORDS, {1: [sft_record(0), sft_record(1, False)]}))
    panel = inspector.sides[0]
    assert "demonstration" in panel.header.text() and "the data's answer, not a sample" in panel.header.text()
    assert "demonstration 0" in inspector.summary.text() and "1 of 4 tokens" in inspector.summary.text()
    assert inspector.rollout_box.currentText().startswith("#0 · demonstration · mean logprob")
    # Coloured by its probability (declared first), on a fixed scale: darkest at 0.
    assert inspector.key == "probability" and (inspector.scale.quiet, inspector.scale.loud) == (1.0, 0.0)
    assert not inspector.legend.note.isVisible()
    assert close(painted(panel.view, 2), inspector.scale.hex(0.1))
    assert not close(painted(panel.view, 2), painted(panel.view, 0))
    tip = tooltip(qtbot, panel.view, 2)
    assert "demonstration token 2" in tip and "probability 0.1" in tip and "rank 3" in tip
    assert "the model's top 5" in tip and "2 ◀ the data's" in tip
    for token, prob in (("1", 0.5), ("·", 0.3), ("2", 0.1)):
        assert f"{token} {prob:.4g}" in tip or f"{token} ◀ the data's {prob:.4g}" in tip
    assert "rank 1 (the model's top choice)" in tooltip(qtbot, panel.view, 0)
    # A record from before `rank`: its place among the top 5 stands in for it.
    qtbot.mouseClick(panel.view.viewport(), Qt.LeftButton, pos=panel.view.token_rect(1).center().toPoint())
    qtbot.keyClick(panel.view, Qt.Key_Right)
    assert inspector.current.index == 1 and "rank" not in inspector.current.sides[0].numbers
    assert "rank 3 (of the top 5)" in tooltip(qtbot, panel.view, 2)
