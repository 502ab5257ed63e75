"""A reward model's report card (`rl-engine reward-report`, the window's report page):
card.py the numbers and verdicts (torch-free), preflight.py the checks, compute.py the
scoring of a run's pairs."""
