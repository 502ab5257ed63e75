"""The set-up form offers the registered variants (pytest-qt, offscreen): a name registered
at run time is a choice of its field, with its help as the tooltip, typed key by key or
picked from the combo; the window needs no change for it."""

from __future__ import annotations

from PySide6.QtCore import Qt

from engine.rl.catalog import ESTIMATORS, REWARD_SCALINGS, Estimator, RewardScaling
from workbench.setup import schema
from workbench.setup.editors import ChoiceEditor, SuggestEditor
from window_fixtures import make_window, unfold, window  # noqa: F401 (fixtures)


def halve(centred, grouped):
    """Half of the centred rewards."""
    return centred / 2


def problems_at(panel, path: str) -> list[str]:
    return [message for where, message in panel.validate_now() if where == path]


def combo_items(combo) -> list[str]:
    return [combo.itemText(i) for i in range(combo.count())]


def test_a_registered_estimator_is_offered_and_typed_key_by_key(make_window, qtbot):
    ESTIMATORS.register("test_halved", "engine.rl.advantages:rloo_estimator", "the test's estimator",
                        Estimator(), origin=__name__)
    try:
        spec = next(s for s in schema.algorithm_fields("grpo") if s.path == "algorithm.advantage_estimator")
        assert spec.kind == schema.CHOICE and spec.choices == ESTIMATORS.names() and spec.free_text
        assert "<b>test_halved</b>: the test&#x27;s estimator" in spec.tooltip()
        assert "<b>rloo</b>: r minus the mean of the group&#x27;s other completions" in spec.tooltip()

        window = make_window()
        editor = window.setup.editor("algorithm.advantage_estimator")
        assert isinstance(editor, SuggestEditor) and "test_halved" in combo_items(editor.combo)
        index = combo_items(editor.combo).index("test_halved")
        assert editor.combo.itemData(index, Qt.ToolTipRole) == "the test's estimator"

        editor.line.setFocus()
        editor.line.selectAll()
        qtbot.keyClick(editor.line, Qt.Key_Delete)
        qtbot.keyClicks(editor.line, "test_halve")
        assert window.doc.get("algorithm.advantage_estimator") == "test_halve"
        (problem,) = problems_at(window.setup, "algorithm.advantage_estimator")
        assert problem.startswith("unknown advantage estimator 'test_halve' (did you mean `test_halved`?)")
        qtbot.keyClicks(editor.line, "d")
        assert window.doc.get("algorithm.advantage_estimator") == "test_halved"
        assert problems_at(window.setup, "algorithm.advantage_estimator") == []

        # a user's own function in a file is typed too (checked for its form only here)
        editor.line.selectAll()
        qtbot.keyClick(editor.line, Qt.Key_Delete)
        qtbot.keyClicks(editor.line, "my_advantages.py:median_baseline")
        assert window.doc.get("algorithm.advantage_estimator") == "my_advantages.py:median_baseline"
        assert problems_at(window.setup, "algorithm.advantage_estimator") == []
        # ... in a combo as wide as the column's text fields (it had kept its suggestions'
        # width, showing "my_advanta" of the name).
        window.resize(1400, 900)
        unfold(qtbot, window.setup, "algorithm")  # the hyperparameters beyond the essentials
        text_field = window.setup.editor("algorithm.epsilon").input_widget()
        qtbot.waitUntil(lambda: editor.combo.isVisible() and text_field.isVisible())
        assert editor.combo.width() >= 0.9 * text_field.width()
    finally:
        ESTIMATORS.unregister("test_halved")


def test_a_registered_reward_scaling_is_picked_from_the_combo(make_window):
    REWARD_SCALINGS.register("test_halve", halve, declares=RewardScaling(), origin=__name__)
    try:
        window = make_window()
        editor = window.setup.editor("algorithm.scale_rewards")
        assert isinstance(editor, ChoiceEditor)
        assert combo_items(editor.combo) == ["group", "batch", "none", "test_halve"]
        index = combo_items(editor.combo).index("test_halve")
        assert editor.combo.itemData(index, Qt.ToolTipRole) == "Half of the centred rewards."
        editor.combo.setCurrentIndex(index)
        editor.combo.activated.emit(index)
        assert window.doc.get("algorithm.scale_rewards") == "test_halve"
        assert problems_at(window.setup, "algorithm.scale_rewards") == []
    finally:
        REWARD_SCALINGS.unregister("test_halve")
    # a window built after the variant is gone no longer offers it
    editor = make_window().setup.editor("algorithm.scale_rewards")
    assert combo_items(editor.combo) == ["group", "batch", "none"]
