"""Evaluation like a researcher (`rl-engine eval`): estimators.py the pass@k, pass^k, maj@k
and best-of-N estimators (pure), answers.py the answer rules votes count by;
engine/commands/evaluate.py samples and grades."""
