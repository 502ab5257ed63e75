"""The trajectory inspector: Qt-free models beside the Qt views.

Models (no Qt; tests/test_import_graph.py holds them to it):
  colors      colour maps and scales, value -> hex
  quantities  the per-token quantities, their colour scales, number formatting
  records     trajectory records (Trajectory, Side) and how tokens are drawn
  export      the summary line, the token tooltip, HTML and JSON export
  index       the step-file index, a prompt group, a prompt's history
  steps       step rewards: each step's end token and score, their words, marks and colours
  navigation  which step and rollout are shown, and the moves between them
  update_effect  the step's update token by token: Δ log p, Δ p, the tokens moved against their push
  wording     counts with their noun, signed numbers with round-off as 0
Views (Qt): view (the tab), trajectory_page (text, plot and token details, linked),
widgets (the pickers' bar, legend, step box, side panel), text (the token text),
plot (the quantity plot), group (the Group page), history (the Prompt history page).
Import the views from their modules (workbench.inspector.<module>): the package names none, so
importing a model pulls in no Qt.
"""
