"""The reward playground: score completions (a run's logged samples, or typed ones) with
edited rewards, beside what the run had, and carry the rewards into the set-up form.

Model (no Qt): model (the completions, the engine request and its answer, the rewards
made fit for the set-up form). Views (Qt): view (`PlaygroundView`, the tab), source
(where the completions come from; the tab holds the set-up form's rewards editor on the
playground's copy of the preset), results (the table), scorer (`rl-engine
score-rewards` in a QProcess). The scoring is the engine's (engine/commands/score_rewards.py).
"""
