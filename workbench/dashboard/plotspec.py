"""Which plots the dashboard shows, chosen by the metric names a run logged and the
plots its run_started declared (workbench/run_declaration.py). No Qt.

Each `PlotSpec` names the metrics it draws (exact names or patterns such as
`rewards/<name>/mean` for every reward component). A plot is shown when the run has any
of its metrics; an algorithm's own plots (`declared_only`, and any plot the catalogue
does not know, built from the declaration) only when the run declares them. Metrics no
plot claims are offered in the "other metric" plot, so nothing logged is out of reach.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from engine.algorithms.declaration import common_plot_help
from workbench.run_declaration import declaration_of

METRICS, EVAL = "metrics", "eval"


@dataclass(frozen=True)
class CurveSpec:
    metric: str  # name in the events (or a pattern; see PlotSpec.curves)
    label: str = ""
    source: str = METRICS  # "metrics" events or "eval" events
    std: str | None = None  # metric holding the std, drawn as a +- band
    help: str = ""  # what the metric means (the plot's tooltip)


@dataclass(frozen=True)
class PlotSpec:
    key: str
    title: str
    curves: tuple[CurveSpec, ...] = ()
    # Patterns whose matches each become a curve, e.g. r"rewards/(?P<label>[^/]+)/mean".
    patterns: tuple[tuple[str, str], ...] = ()  # (regex, source)
    declared_only: bool = False  # shown only when the run's declaration lists the key
    unit: str = ""
    note_when_empty: str = "no values logged (all null)"
    help: str = ""  # what the plot shows (its tooltip, above each curve's own help)

    def resolve(self, names: dict[str, set[str]]) -> list[CurveSpec]:
        """The curves this plot has for a run whose metric names are `names[source]`."""
        out = [c for c in self.curves if c.metric in names.get(c.source, set())]
        for pattern, source in self.patterns:
            regex = re.compile(pattern)
            for name in sorted(names.get(source, set())):
                match = regex.fullmatch(name)
                if match:
                    label = match.groupdict().get("label") or name
                    out.append(CurveSpec(name, label, source))
        return out

    def applies(self, names: dict[str, set[str]], declared_keys: set[str]) -> bool:
        if self.declared_only and self.key not in declared_keys:
            return False
        return bool(self.resolve(names))


C = CurveSpec

CATALOGUE: tuple[PlotSpec, ...] = (
    PlotSpec("reward", "Reward", (C("reward", "reward (mean ± std)", std="reward_std"),),
             patterns=((r"rewards/(?P<label>[^/]+)/mean", METRICS),)),
    PlotSpec("eval", "Held-out evaluation", (C("accuracy", "accuracy", EVAL), C("reward", "reward", EVAL)),
             note_when_empty="no accuracy: the data has no answers"),
    PlotSpec("kl", "KL to reference", (C("kl", "kl"),),
             note_when_empty="kl is null: beta = 0 skips the reference pass over the batch (the inspector's recorded rows still get one, for their per-token KL)"),
    PlotSpec("entropy", "Entropy", (C("entropy", "entropy"),), unit="nats"),
    PlotSpec("loss", "Loss", (C("loss", "loss"), C("nll_loss", "chosen NLL (DPO's rpo_alpha)"))),
    PlotSpec("clip", "Clip ratio", (C("clip_ratio/region_mean", "either"), C("clip_ratio/low_mean", "low"),
                                    C("clip_ratio/high_mean", "high"))),
    PlotSpec("length", "Completion length", (C("completions/mean_length", "mean"), C("completions/min_length", "min"),
                                             C("completions/max_length", "max")), unit="tokens"),
    PlotSpec("truncated", "Truncated completions", (C("completions/clipped_ratio", "fraction without EOS"),)),
    PlotSpec("zero_std", "Groups with no signal", (C("frac_reward_zero_std", "fraction of groups, all rewards equal"),)),
    PlotSpec("grad_norm", "Gradient norm", (C("grad_norm", "before clipping"),)),
    PlotSpec("lr", "Learning rate", (C("learning_rate", "learning rate"),)),
    PlotSpec("throughput", "Throughput", (C("throughput/tokens_per_second", "tokens/s"),
                                          C("throughput/rollout_tokens_per_second", "rollout tokens/s")), unit="tokens/s"),
    PlotSpec("timing", "Step time", (C("step_time", "step"), C("timing/rollout", "rollout"), C("timing/reward", "reward"),
                                     C("timing/update", "update")), unit="s"),
    # PPO (names as TRL's PPO trainer logs them).
    PlotSpec("ppo_objective", "RLHF objective", (C("objective/rlhf_reward", "score + KL penalty"),
                                                 C("objective/scores", "score"),
                                                 C("objective/non_score_reward", "KL penalty")), declared_only=True),
    PlotSpec("value_loss", "Value loss", (C("loss/value_avg", "value loss"), C("loss/policy_avg", "policy loss")),
             declared_only=True),
    PlotSpec("explained_variance", "Explained variance", (C("val/explained_variance", "explained variance"),),
             declared_only=True),
    PlotSpec("ppo_clip", "Clipped fraction", (C("policy/clipfrac_avg", "policy"), C("val/clipfrac_avg", "value")),
             declared_only=True),
    PlotSpec("ppo_approxkl", "Policy change per update", (C("policy/approxkl_avg", "approx. KL old → new"),
                                                          C("val/ratio", "mean ratio")), declared_only=True),
    # DPO (TRL's DPO names).
    PlotSpec("dpo_margins", "Reward margins", (C("rewards/margins", "chosen − rejected"), C("rewards/chosen", "chosen"),
                                              C("rewards/rejected", "rejected")), declared_only=True),
    PlotSpec("dpo_logps", "Sequence logprobs", (C("logps/chosen", "chosen"), C("logps/rejected", "rejected")),
             declared_only=True),
    PlotSpec("dpo_eval", "Held-out preference accuracy", (C("preference_accuracy", "chosen above rejected", EVAL),),
             declared_only=True),
    PlotSpec("dpo_accuracy", "Preference accuracy", (C("rewards/accuracies", "accuracy"),), declared_only=True),
    # The update's effect (training.record_update_effect): over the recorded rows' tokens,
    # log p after the step's update minus before (engine/rl/update_effect.py).
    PlotSpec("update_effect", "Update effect on tokens", (
        C("update/against_advantage_ratio", "moved against the advantage", help=(
            "share of the recorded tokens (advantage not 0) whose log-probability moved against the sign of "
            "their advantage in this step's update: clipping, the KL term and the other completions sharing "
            "the weights can cause it; DPO: chosen tokens that fell, rejected ones that rose")),
        C("update/change_top10_share", "top 10 % share of |Δ log p|", help=(
            "share of the total |Δ log p| carried by the 10 % of recorded tokens that moved most: 0.1 when "
            "every token moves alike, near 1 when a few decision points carry the update"))),
        declared_only=True),
    PlotSpec("update_change", "Δ log p by advantage sign", (
        C("update/change_pos_adv_mean", "advantage > 0", help=(
            "mean Δ log p (log p after the update − before) of the recorded tokens with a positive "
            "advantage: above 0 when the update made them more likely, as it means to")),
        C("update/change_neg_adv_mean", "advantage < 0", help=(
            "mean Δ log p of the recorded tokens with a negative advantage: below 0 when the update made "
            "them less likely, as it means to")),
        C("update/change_abs_mean", "mean |Δ log p|", help=(
            "mean |Δ log p| over the recorded tokens: how far the step's update moved a token, either way"))),
        declared_only=True, unit="Δ log p"),
    # Multi-turn episodes with tools (data.environment; the tools/* names as TRL logs them).
    PlotSpec("episode_turns", "Turns per episode", (
        C("episodes/turns_mean", "mean turns", help=(
            "the model's turns per episode, averaged over the step's episodes: 1 when it answers without "
            "calling a tool, up to data.max_turns")),), unit="turns"),
    PlotSpec("tool_calls", "Tool calls per episode", (
        C("tools/call_frequency", "calls per episode", help="tool calls per episode, averaged over the step"),
        C("tools/failure_frequency", "failed / calls", help=(
            "the share of the step's tool calls that failed: a tool that raised or did not return within "
            "data.tool_timeout, an unknown tool, or a call that could not be parsed")))),
    PlotSpec("episode_truncated", "Truncated episodes", (
        C("episodes/truncated_ratio", "fraction truncated", help=(
            "share of the step's episodes cut short before the model's final answer: the token budget "
            "(algorithm.max_completion_length counts the whole episode), data.max_turns or "
            "data.max_tool_calls ran out")),)),
    PlotSpec("episode_tokens", "Tokens per episode", (
        C("episodes/model_tokens_mean", "model (trained)", help="tokens the model wrote per episode: the trained ones"),
        C("episodes/tool_tokens_mean", "tool / environment (not trained)", help=(
            "tokens the tools' results and the chat template added between turns, per episode: attended to, "
            "never trained"))), unit="tokens"),
)

# Every step carries these; they are not worth a plot of their own but stay reachable
# through "other metric".
_BOOKKEEPING = {"num_tokens", "skipped_steps", "throughput/samples_per_second", "eval_time", "num_examples", "num_pairs"}


@dataclass
class Layout:
    plots: list[tuple[PlotSpec, list[CurveSpec]]] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # metrics no plot claims


Declared = "str | dict | list[dict]"


def metric_help(metric: str, source: str = METRICS) -> str:
    """What a metric means, from the catalogue ('' when it says nothing).

    >>> metric_help("update/change_abs_mean")[:11]
    'mean |Δ log'
    """
    return next((c.help for spec in CATALOGUE for c in spec.curves
                 if c.metric == metric and c.source == source and c.help), "")


def plot_help(spec: PlotSpec, curves: list[CurveSpec]) -> str:
    """A plot's tooltip: what it shows, then each curve's meaning ('' when none is known)."""
    lines = [spec.help] if spec.help else []
    for curve in curves:
        meaning = curve.help or metric_help(curve.metric, curve.source)
        if meaning:
            lines.append(f"{curve.label or curve.metric} ({curve.metric}): {meaning}")
    return "\n".join(lines)


def declared_plots(declared) -> list[dict]:
    """The declared plot entries: `declared` is a declaration ({"plots": ...}), a list of
    plot entries, or an old run's algorithm name."""
    if isinstance(declared, str):
        declared = declaration_of({"algorithm": declared})
    if isinstance(declared, dict):
        declared = declared.get("plots") or []
    return [p for p in declared or [] if isinstance(p, dict) and p.get("key")]


def _declared_label(metric: str, source: str) -> str:
    """A declared curve's name: a reward component's label for its mean, a held-out
    curve marked as such (a plot may draw one metric in training and held out).

    >>> _declared_label("rewards/exact_match/mean", EVAL), _declared_label("loss", METRICS)
    ('exact_match (held-out)', 'loss')
    """
    match = re.fullmatch(r"rewards/(?P<label>[^/]+)/mean", metric)
    name = match["label"] if match else metric
    return f"{name} (held-out)" if source == EVAL else name


def _from_declaration(entry: dict) -> PlotSpec:
    """A plot the catalogue does not know, as declared: one curve per metric, under the
    declared help."""
    curves = [CurveSpec(str(m), _declared_label(str(m), METRICS)) for m in entry.get("metrics") or []]
    curves += [CurveSpec(str(m), _declared_label(str(m), EVAL), EVAL) for m in entry.get("eval") or []]
    return PlotSpec(str(entry["key"]), str(entry.get("title") or entry["key"]), tuple(curves),
                    help=str(entry.get("help") or "").strip())


_CATALOGUE_KL = next(spec for spec in CATALOGUE if spec.key == "kl")  # (the doctest's)


def _as_declared(spec: PlotSpec, entry: dict | None) -> PlotSpec:
    """A catalogue plot under the title and help its run declared: the algorithm knows
    what its metric means (KTO's `kl` is a reference point, not a KL to the reference).
    A declared title without help drops the catalogue's plot help, which described the
    catalogue's plot; each curve keeps its metric's help. No declared title (an old
    run): the catalogue's own.

    >>> spec = _as_declared(_CATALOGUE_KL, {"key": "kl", "title": "KL reference point"})
    >>> spec.title, spec.help
    ('KL reference point', '')
    >>> _as_declared(_CATALOGUE_KL, {"key": "kl"}).title
    'KL to reference'
    """
    if not entry:
        return spec
    title = str(entry.get("title") or "").strip()
    help_ = str(entry.get("help") or "").strip()
    if not title and not help_:
        return spec
    if title and title != spec.title and not help_:
        return replace(spec, title=title, help="")
    return replace(spec, title=title or spec.title, help=help_ or spec.help)


def _listed(entry: dict) -> set[tuple[str, str]]:
    """The (source, metric) curves a declared plot entry lists."""
    return ({(METRICS, str(m)) for m in entry.get("metrics") or []}
            | {(EVAL, str(m)) for m in entry.get("eval") or []})


def choose_plots(names: dict[str, set[str]], declared) -> Layout:
    """The plots for one run (or the union over runs being compared): the catalogue's,
    in its order, then declared plots it does not know; and the metrics left for the
    "other metric" plot. `declared`: see declared_plots.

    >>> layout = choose_plots({"metrics": {"reward", "reward_std", "rewards/exact/mean", "kl", "num_tokens"}}, "grpo")
    >>> [p.key for p, _ in layout.plots], layout.other
    (['reward', 'kl'], ['num_tokens'])
    """
    entries = declared_plots(declared)
    keys = {str(p["key"]) for p in entries}
    known = {spec.key for spec in CATALOGUE}
    first: dict[str, dict] = {}
    for entry in entries:
        first.setdefault(str(entry["key"]), entry)
    specs = [_as_declared(spec, first.get(spec.key)) for spec in CATALOGUE]
    specs += [_from_declaration(p) for p in entries if p["key"] not in known]
    # A plot declared without help (a run recorded before plots carried it) or logged
    # without being declared: the engine's help for the same key and title.
    specs = [spec if spec.help else replace(spec, help=common_plot_help(spec.key, spec.title)) for spec in specs]
    layout = Layout()
    listed = {key: _listed(entry) for key, entry in first.items()}
    every_listed = set().union(*listed.values())
    claimed: set[tuple[str, str]] = set()
    for spec in specs:
        if not spec.applies(names, keys):
            continue
        own = listed.get(spec.key, set())
        # Each metric is drawn once: a curve the catalogue adds is left to the declared
        # plot that lists it (SFT's "sft_entropy" draws `entropy`, so the catalogue's
        # Entropy plot goes), and a curve an earlier plot draws is not drawn again (runs
        # compared whose algorithms declare one metric under two keys).
        curves = [c for c in spec.resolve(names) if (c.source, c.metric) not in claimed
                  and ((c.source, c.metric) in own or (c.source, c.metric) not in every_listed)]
        if not curves:
            continue
        layout.plots.append((spec, curves))
        for curve in curves:
            claimed.add((curve.source, curve.metric))
            if curve.std:
                claimed.add((curve.source, curve.std))
    layout.other = sorted(n for n in names.get(METRICS, set()) if (METRICS, n) not in claimed)
    layout.other += sorted(f"eval:{n}" for n in names.get(EVAL, set())
                           if (EVAL, n) not in claimed and n not in _BOOKKEEPING)
    return layout


def expected_names(declared) -> dict[str, set[str]]:
    """Before a run's first metrics arrive: the metrics its declared plots expect, so
    the dashboard has its plots in place from the start.

    >>> sorted(expected_names([{"key": "x", "title": "X", "metrics": ["a"], "eval": ["b"]}])[EVAL])
    ['b']
    """
    out: dict[str, set[str]] = {METRICS: set(), EVAL: set()}
    for entry in declared_plots(declared):
        out[METRICS].update(str(m) for m in entry.get("metrics") or [])
        out[EVAL].update(str(m) for m in entry.get("eval") or [])
    return out
