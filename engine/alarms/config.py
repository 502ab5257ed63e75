"""The preset's `alarms` section: when the engine's watch over its own metrics speaks up
(engine/alarms/detectors.py). Torch-free: the window builds its form from it."""

from __future__ import annotations

from pydantic import Field

from engine.foundation.section import Float, Section

__all__ = ["AlarmsConfig"]


class AlarmsConfig(Section):
    enabled: bool = Field(True, description="Watch the run's metrics and write `alarm` events (a warning line, "
                          "a marker on the window's plots) when it stops learning or goes wrong.")
    window: int = Field(10, ge=2, le=10_000, description="Steps a condition must hold, and the span of the "
                        "running averages the alarms compare.")
    equal_rewards_fraction: Float = Field(
        0.9, gt=0.0, le=1.0, description="No learning signal: the share of prompt groups whose completions all "
        "got one reward (frac_reward_zero_std), averaged over `window` steps, at or above this. The same share "
        "of groups whose steps were all scored alike (frac_step_reward_zero_std) raises the step-reward alarm.")
    truncated_fraction: Float = Field(
        0.9, gt=0.0, le=1.0, description="No learning signal: the share of completions cut at "
        "max_completion_length, averaged over `window` steps, at or above this.")
    single_step_fraction: Float = Field(
        0.9, gt=0.5, le=1.0, description="Steps no longer split: the share of completions a step reward found at "
        "most one step in (steps/single_step_ratio), averaged over `window` steps, at or above this, after a "
        "`window` of steps earlier in the run at or below 0.5 (the completions stopped containing the step "
        "delimiter).")
    kl_spike_factor: Float = Field(
        4.0, gt=1.0, le=1e6, description="KL spike: a step's KL at least this many times its mean over the "
        "`window` steps before ...")
    kl_spike_min: Float = Field(0.3, ge=0.0, le=1e6, description="... and at least this much (per token).")
    against_advantage_fraction: Float = Field(
        0.6, gt=0.0, le=1.0, description="Tokens moved against their advantage: the share of the recorded tokens "
        "with a nonzero advantage whose log-probability the update moved the other way "
        "(update/against_advantage_ratio, recorded with training.record_update_effect), averaged over `window` "
        "steps, at or above this. Tokens moved at random would give 0.5; the bundled presets' healthy runs stay "
        "between 0.2 and 0.5 (a few recorded rows make it noisy).")
    entropy_collapse_fraction: Float = Field(
        0.2, gt=0.0, lt=1.0, description="Entropy collapse: the mean entropy over `window` steps fell below this "
        "fraction of its level over the first `window` steps.")
    length_drift_fraction: Float = Field(
        0.5, gt=0.0, le=1e6, description="Length drift: the mean completion length moved by this fraction of its "
        "first `window` steps' level while the held-out score stayed within `eval_tolerance`.")
    eval_tolerance: Float = Field(0.02, ge=0.0, le=1e6, description="A held-out score that moved less than this "
                                  "has not moved.")
    hacking_correlation: Float = Field(
        0.8, gt=0.0, le=1.0, description="Reward hacking sign: reward and completion length over the last "
        "2 x `window` steps correlated at least this much ...")
    hacking_length_rise: Float = Field(
        0.2, gt=0.0, le=1e6, description="... while the length rose by at least this fraction (and the reward rose).")
    eval_drop: Float = Field(
        0.1, gt=0.0, le=1e6, description="Held-out falling: the held-out score fell this much below its best ...")
    reward_rise: Float = Field(
        0.05, ge=0.0, le=1e6, description="... while the training reward's `window`-step mean rose at least this "
        "much since that best evaluation.")
    exploit_check_drop: Float = Field(
        0.1, gt=0.0, le=1e6, description="Reward model exploited: a check read against a learned reward (a verifier "
        "beside a reward_model, e.g. exact_match with weight 0) fell this much below its best, on the held-out "
        "prompts (or in `window`-step training means without evaluations) ...")
    exploit_reward_rise: Float = Field(
        0.05, ge=0.0, le=1e6, description="... while the learned reward's `window`-step training mean rose at least "
        "this much (in its own units) since then; a held-out learned reward falling this much while it rises fires "
        "it too.")
    exploit_kl_factor: Float = Field(
        3.0, gt=1.0, le=1e6, description="Reward model exploited: KL grew this many times over 2 x `window` steps "
        "while the learned reward rose, the two correlated at least hacking_correlation (a length rise of "
        "hacking_length_rise counts the same way).")
