"""`rl-engine export RUN_DIR`: what a run made, in the forms other tools read.

    --adapter OUT      the checkpoint's LoRA adapter (peft format), the tokenizer as the
                       run used it and a model card: PeftModel.from_pretrained(base, OUT)
    --merged OUT       the base model (loaded as the run loaded it, fp32 on the CPU) with
                       the adapter merged in, saved in the dtype the base model was stored
                       in (bf16 stays bf16): AutoModelForCausalLM.from_pretrained(OUT)
    --tensorboard OUT  the run's events as TensorBoard event files (engine/run/tensorboard_events.py)

`--checkpoint` picks one (step_N, step_000050 or N; default the newest complete one).
An OUT that exists and is not empty is refused; each output is written to a hidden
folder beside OUT and renamed when complete, so a failed export leaves no half folder.
Exit status 0; 2 for bad input (no such run or checkpoint, OUT not empty, tensorboard
not installed); 1 when loading or writing fails, or when SIGTERM cancels it (the hidden
folder is removed first).

`--progress` prints a line on stdout as each stage starts, for programs that show
progress (the window's Export dialog): `progress: DONE/TOTAL WHAT`, DONE the stages
finished of TOTAL for every output asked for, and a last `progress: TOTAL/TOTAL done`.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import warnings
from pathlib import Path

from engine.run import rundir
from engine.run.failures import NoSuchCheckpoint, checkpoint_step, failure_message, named_checkpoint
from engine.preset.schema import load_preset
from engine.foundation.errors import PresetError
from engine.foundation.run_files import adapter_chain

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2

__all__ = ["ExportError", "find_checkpoint", "check_output", "model_card", "export_adapter", "export_merged",
           "export_tensorboard", "run_export"]


class ExportError(ValueError):
    """Bad input to an export; the message says what to change (exit status 2)."""


# ------------------------------------------------------------------ checking input


def find_checkpoint(run_dir: Path, name: str | None = None) -> Path:
    """The complete checkpoint folder `name` names, or the newest one; ExportError naming
    the available ones when there is no such checkpoint."""
    try:
        return named_checkpoint(run_dir, name, "to export")
    except NoSuchCheckpoint as exc:
        raise ExportError(str(exc)) from None


def check_output(path: str | Path, flag: str) -> Path:
    """OUT as a Path; ExportError when it exists and is not an empty folder."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ExportError(f"{flag} {out}: a file of that name exists; choose a new folder")
    if out.is_dir() and any(out.iterdir()):
        raise ExportError(f"{flag} {out}: the folder exists and is not empty; refusing to write into it "
                          "(choose a new folder, or empty it)")
    return out


class _Staged:
    """A hidden folder beside OUT to write into; renamed to OUT when the block ends
    without an error, removed when it does not."""

    def __init__(self, out: Path):
        self.out = out
        self.tmp = out.with_name(f".{out.name}.export.tmp")

    def __enter__(self) -> Path:
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(parents=True)
        return self.tmp

    def __exit__(self, kind, exc, tb) -> None:
        if kind is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        if self.out.is_dir():
            self.out.rmdir()  # empty: check_output made sure
        self.tmp.rename(self.out)


# ------------------------------------------------------------------ progress

# The stages of each output, in the order they are announced (the totals come from here).
STAGES = {
    "run": ("reading the run's events",),
    "--adapter": ("adapter: copying the checkpoint's adapter", "adapter: saving the tokenizer",
                  "adapter: writing the model card"),
    "--merged": ("merged: loading the tokenizer", "merged: loading the base model", "merged: applying the adapter",
                 "merged: merging", "merged: saving", "merged: tokenizer and model card"),
    "--tensorboard": ("tensorboard: writing the event files",),
}


class Progress:
    """`progress: DONE/TOTAL WHAT` lines on stdout as each stage starts (when on); a
    stage may repeat its line with a detail (events written so far) without finishing.

    >>> p = Progress(2, on=True); p.stage("reading the run's events"); p.stage("adapter"); p.finish()
    progress: 0/2 reading the run's events
    progress: 1/2 adapter
    progress: 2/2 done
    """

    def __init__(self, total: int, on: bool):
        self.total, self.on, self.done = total, on, -1

    def stage(self, what: str) -> None:
        self.done += 1
        self.detail(what)

    def detail(self, what: str) -> None:
        if _Cancel.asked:  # a cancel whose first raise was dropped (_Cancel)
            raise Cancelled()
        if self.on:
            print(f"progress: {max(self.done, 0)}/{self.total} {what}", flush=True)

    def finish(self) -> None:
        self.done = self.total
        self.detail("done")


class Cancelled(BaseException):
    """SIGTERM during an export (the window's Cancel): a BaseException, so that no
    library's `except Exception` swallows it on the way out through _Staged."""


class _Cancel:
    """Whether SIGTERM asked for a cancel: the handler raises Cancelled at once, and the
    next progress line raises it again, because a raise that lands in code Python runs
    for itself (an import's lock callback) is printed as "Exception ignored" and dropped."""

    asked = False


def _cancel_on_sigterm(signum, frame) -> None:
    _Cancel.asked = True
    raise Cancelled()


# ------------------------------------------------------------------ the model card

_SHOWN_METRICS = ("reward", "reward_std", "kl", "entropy", "loss", "objective/scores", "objective/kl",
                  "objective/rlhf_reward", "rewards/accuracies", "rewards/margins", "rewards/chosen",
                  "rewards/rejected", "completions/mean_length")


def _shown(key: str) -> bool:
    return key in _SHOWN_METRICS or (key.startswith("rewards/") and key.endswith("/mean"))


def _numbers(event: dict, keep) -> list[tuple[str, float]]:
    return [(k, v) for k, v in event.items() if keep(k) and isinstance(v, (int, float)) and not isinstance(v, bool)]


def _last(events: list[dict], kind: str, up_to: int | None) -> dict | None:
    found = [e for e in events if e.get("type") == kind and (up_to is None or (e.get("step") or 0) <= up_to)]
    return found[-1] if found else None


def _settings(preset, checkpoint: Path) -> list[tuple[str, str]]:
    algo = {k: v for k, v in preset.algorithm.model_dump().items() if k != "name"}
    lora = preset.model.lora
    targets = lora.target_modules
    try:  # `auto`: the modules the run found, as the adapter lists them
        targets = json.loads((checkpoint / "adapter_config.json").read_text())["target_modules"]
    except (OSError, ValueError, KeyError):
        pass
    targets = targets if isinstance(targets, str) else ", ".join(sorted(targets))
    data = preset.data
    source = (f"task `{data.task}`" if data.task else
              f"`{data.dataset or data.path}`" + (f" ({data.subset})" if data.subset else "") + f", split {data.split}")
    t = preset.training
    return [
        ("algorithm", f"{preset.algorithm.name}: " + ", ".join(f"{k} {v}" for k, v in algo.items())),
        ("base model", f"`{preset.model.name_or_path}`" + (" (RL Workbench's built-in model)"
                                                          if preset.model.name_or_path.startswith("builtin:") else "")),
        ("chat template", str(preset.model.chat_template)),
        ("LoRA", f"r {lora.r}, alpha {lora.alpha}, dropout {lora.dropout}, targets {targets}"),
        ("data", f"{source}; {data.num_train} training prompts, {data.num_eval} held out"),
        ("rewards", ", ".join(f"{r.name} ({r.weight:g})" for r in preset.rewards)),
        ("training", f"{t.max_steps} steps of {t.batch_size}, learning rate {t.learning_rate:g} "
                     f"({t.lr_scheduler_type}, warmup {t.warmup_steps}), seed {t.seed}"),
    ]


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def model_card(preset, run_dir: Path, checkpoint: Path, events: list[dict], merged: bool) -> str:
    """README.md for an exported adapter or merged model: the run, its preset's key
    settings, and the metrics and held-out evaluation at the checkpoint's step."""
    step = checkpoint_step(checkpoint.name)
    from engine.hub.access import hub_ids_of

    hub_base = preset.model.name_or_path in hub_ids_of(preset, run_dir)
    front = ["---", "library_name: " + ("transformers" if merged else "peft"), "pipeline_tag: text-generation"]
    if hub_base:
        front.append(f"base_model: {preset.model.name_or_path}")
    front += ["tags:", "- rl-workbench", f"- {preset.algorithm.name}", "- lora", "---", ""]
    what = "merged model (base + LoRA adapter)" if merged else "LoRA adapter"
    lines = front + [
        f"# {preset.name}: {preset.algorithm.name.upper()} {what}", "",
        f"Exported by RL Workbench (`rl-engine export`) from the run `{run_dir.resolve().name}`, "
        f"checkpoint `{checkpoint.name}` (step {step} of {preset.training.max_steps}).", "",
    ]
    if preset.description:
        lines += [preset.description, ""]
    lines += ["## Training", "", "| setting | value |", "|---|---|"]
    lines += [f"| {k} | {_cell(v)} |" for k, v in _settings(preset, checkpoint)]
    lines.append("")
    metrics = _last(events, "metrics", step)
    evaluation = _last(events, "eval", step)
    lines += ["## Results", ""]
    if metrics:
        shown = ", ".join(f"{k} {v:.4g}" for k, v in _numbers(metrics, _shown))
        lines += [f"Last logged metrics (step {metrics.get('step')}): {shown or 'none'}.", ""]
    if evaluation:
        keep = lambda k: k in ("accuracy", "reward", "preference_accuracy") or (k.startswith("rewards/"))  # noqa: E731
        shown = ", ".join(f"{k} {v:.4g}" for k, v in _numbers(evaluation, keep))
        lines += [f"Last held-out evaluation (step {evaluation.get('step')}, "
                  f"{evaluation.get('num_examples', evaluation.get('num_pairs', '?'))} examples, greedy): "
                  f"{shown or 'no scores'}.", ""]
    if not metrics and not evaluation:
        lines += ["No metrics were logged up to this checkpoint.", ""]
    base = preset.model.name_or_path if not preset.model.name_or_path.startswith("builtin:") else "BASE_MODEL_FOLDER"
    scorer = export_head(preset) == "score"
    auto, extra = ("AutoModelForSequenceClassification", ", num_labels=1") if scorer else ("AutoModelForCausalLM", "")
    lines += ["## Use", "", "```python", f"from transformers import {auto}, AutoTokenizer"]
    if merged:
        lines += [f'model = {auto}.from_pretrained("THIS_FOLDER")',
                  'tokenizer = AutoTokenizer.from_pretrained("THIS_FOLDER")']
    else:
        lines += ["from peft import PeftModel", "",
                  f'base = {auto}.from_pretrained("{base}"{extra})',
                  'model = PeftModel.from_pretrained(base, "THIS_FOLDER")',
                  'tokenizer = AutoTokenizer.from_pretrained("THIS_FOLDER")']
    lines += ["```", ""]
    if scorer:
        lines += ["A reward model: the score of a text (the prompt as the run templated it, then the answer, with "
                  "no end token) is `model(**tokenizer(text, return_tensors=\"pt\")).logits[0, 0]`, read at the "
                  "text's last token that is not padding.", ""]
    earlier = adapter_chain(checkpoint)[:-1]
    if earlier and not merged:
        lines += ["The run started from other runs' adapters (model.start_from); merge them into the base first, "
                  "in this order: " + ", ".join(f"`{p}`" for p in earlier) + ". The merged export (`--merged`) "
                  "has them in.", ""]
    if preset.model.chat_template == "none":
        lines += ["The run fed prompts as plain text (`model.chat_template: none`), not through a chat template.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ the outputs


def _tokenizer(preset, run_dir: Path):
    """The tokenizer as the run used it: the engine's loading (left padding, a pad token),
    with the preset's chat template file when it names one."""
    from engine.model.chat import chat_format
    from engine.model.loading import load_tokenizer, resolve_model_path, tokenizer_chat_template

    tokenizer = load_tokenizer(resolve_model_path(preset.model.name_or_path), preset.model.trust_remote_code)
    fmt = chat_format(preset.model.chat_template, tokenizer_chat_template(tokenizer), None, run_dir)
    if fmt.template is not None and fmt.source not in ("tokenizer", "none", "no template"):
        tokenizer.chat_template = fmt.template
    return tokenizer


def export_adapter(preset, run_dir: Path, checkpoint: Path, out: Path, events: list[dict],
                   progress: Progress | None = None) -> None:
    stages = iter(STAGES["--adapter"])
    stage = progress.stage if progress is not None else (lambda what: None)
    with _Staged(out) as tmp:
        stage(next(stages))
        for file in sorted(checkpoint.glob("adapter_*")):
            shutil.copy2(file, tmp / file.name)
        stage(next(stages))
        _tokenizer(preset, run_dir).save_pretrained(tmp)
        stage(next(stages))
        (tmp / "README.md").write_text(model_card(preset, run_dir, checkpoint, events, merged=False), encoding="utf-8")


def stored_dtype(config):
    """The dtype a model's weights were saved in, from its config (`dtype`, or the older
    `torch_dtype`); None when the config does not say.

    >>> import torch; from types import SimpleNamespace as C
    >>> stored_dtype(C(dtype="bfloat16")), stored_dtype(C(torch_dtype=torch.float16)), stored_dtype(C())
    (torch.bfloat16, torch.float16, None)
    """
    import torch

    value = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(value, str):
        value = getattr(torch, value, None)
    return value if isinstance(value, torch.dtype) and value.is_floating_point else None


def export_head(preset) -> str:
    """What the run trained on top of its base (engine/model/loading.py's HEADS): a
    reward-model run's score head, else the causal LM's."""
    return "score" if preset.algorithm.trains_score_head else "causal_lm"


def load_merged(preset, checkpoint: Path, bar=None, pad_token_id: int | None = None):
    """The run's base model, loaded as the engine loads it but fp32 on the CPU, with the
    adapters of the runs it started from and then the checkpoint's merged in; then cast
    to the dtype the base was stored in, so a bf16 model exports at its own size, not
    twice it (the merge itself is fp32). A reward-model run's is a one-output sequence
    classifier (its score head comes with the adapter; `pad_token_id` tells it where a
    text ends)."""
    import torch
    import transformers
    from peft import PeftModel
    from transformers import AutoConfig

    from engine.model.loading import (HEADS, ModelLoadError, _load_hint, merge_adapters, new_head_quiet,
                                      peft_reading_deprecated_alias, resolve_model_path)

    path = resolve_model_path(preset.model.name_or_path)
    trust = preset.model.trust_remote_code
    head = export_head(preset)
    extra = {"num_labels": 1, "pad_token_id": pad_token_id} if head == "score" else {}
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust, **extra)
        dtype = stored_dtype(config) or torch.float32  # read before loading in fp32 sets config.dtype
        with new_head_quiet(head == "score"):  # the head the checkpoint's adapter brings
            base = getattr(transformers, HEADS[head][0]).from_pretrained(path, config=config, dtype=torch.float32,
                                                                         trust_remote_code=trust)
    except Exception as exc:  # transformers raises many kinds; all mean "cannot load"
        raise ModelLoadError(_load_hint(path, "model", exc)) from exc
    base = merge_adapters(base, adapter_chain(checkpoint)[:-1])  # the runs it started from (model.start_from)
    _advance(bar, "applying the adapter")
    with peft_reading_deprecated_alias():  # peft's own FutureWarning, not ours (engine/model/loading.py)
        model = PeftModel.from_pretrained(base, str(checkpoint))
    _advance(bar, "merging")
    with warnings.catch_warnings():  # transformers' deprecation notices, from inside peft
        warnings.simplefilter("ignore", FutureWarning)
        merged = model.merge_and_unload()
    _advance(bar, "saving")
    return merged.to(dtype)


def _advance(bar, next_stage: str) -> None:
    if bar is not None:
        bar.update(1)
        bar.set_postfix_str(next_stage)


class _MergedBar:
    """The merged export's tqdm bar (for a terminal) and its progress lines, advanced
    together: `update(1)` / `set_postfix_str(next stage)` as load_merged calls them."""

    def __init__(self, bar, progress: Progress | None):
        self.bar, self.progress = bar, progress
        self.stages = iter(STAGES["--merged"][2:])  # the first two are announced by export_merged

    def update(self, n: int) -> None:
        self.bar.update(n)

    def set_postfix_str(self, text: str) -> None:
        self.bar.set_postfix_str(text)
        if self.progress is not None:
            self.progress.stage(next(self.stages))


def export_merged(preset, run_dir: Path, checkpoint: Path, out: Path, events: list[dict], quiet: bool,
                  progress: Progress | None = None) -> None:
    from tqdm import tqdm

    stage = progress.stage if progress is not None else (lambda what: None)
    with tqdm(total=5, desc="merged", unit="stage", file=sys.stderr, disable=quiet, dynamic_ncols=True) as tq:
        bar = _MergedBar(tq, progress)
        tq.set_postfix_str("loading the base model")
        stage(STAGES["--merged"][0])
        tokenizer = _tokenizer(preset, run_dir)
        stage(STAGES["--merged"][1])
        model = load_merged(preset, checkpoint, bar, tokenizer.pad_token_id)
        generation = getattr(model, "generation_config", None)  # a score model has none
        if generation is not None and generation.pad_token_id is None:
            generation.pad_token_id = tokenizer.pad_token_id
        with _Staged(out) as tmp:
            model.save_pretrained(tmp)
            _advance(bar, "tokenizer and model card")
            tokenizer.save_pretrained(tmp)
            (tmp / "README.md").write_text(model_card(preset, run_dir, checkpoint, events, merged=True),
                                           encoding="utf-8")
            bar.update(1)


def export_tensorboard(events: list[dict], out: Path, quiet: bool, progress: Progress | None = None) -> int:
    """The events as TensorBoard files in `out`; returns the TensorBoard events written."""
    from tqdm import tqdm

    from engine.run.tensorboard_events import TensorBoardEvents

    what = STAGES["--tensorboard"][0]
    if progress is not None:
        progress.stage(what)
    every = max(1, len(events) // 20)  # about twenty detail lines, however long the run
    with _Staged(out) as tmp:
        board = TensorBoardEvents(tmp)
        try:
            for i, event in enumerate(tqdm(events, desc="tensorboard", unit="event", file=sys.stderr,
                                           disable=quiet, dynamic_ncols=True), 1):
                board.write(event)
                if progress is not None and (i % every == 0 or i == len(events)):
                    progress.detail(f"{what} ({i}/{len(events)} events)")
        finally:
            board.close()
        return board.written


def run_export(args) -> int:
    """`rl-engine export`: check everything first, then write each output asked for."""
    run_dir = Path(args.run_dir)
    outputs = [(flag, getattr(args, attr)) for flag, attr in
               (("--adapter", "adapter"), ("--merged", "merged"), ("--tensorboard", "tensorboard"))]
    outputs = [(flag, value) for flag, value in outputs if value]
    try:
        if not outputs:
            raise ExportError("nothing to export: give at least one of --adapter OUT, --merged OUT, --tensorboard OUT")
        if not run_dir.is_dir():
            raise ExportError(f"{run_dir} is not a folder (give a run directory, e.g. runs/NAME-TIMESTAMP)")
        outs = {flag: check_output(value, flag) for flag, value in outputs}
        if len({p.resolve() for p in outs.values()}) < len(outs):
            raise ExportError("give each output its own folder")
        needs_model = "--adapter" in outs or "--merged" in outs
        checkpoint = find_checkpoint(run_dir, args.checkpoint) if needs_model or args.checkpoint else None
        if "--tensorboard" in outs:
            from engine.run.tensorboard_events import _import_tensorboard

            _import_tensorboard()
        preset = load_preset(run_dir / rundir.PRESET_FILE) if needs_model else None
    except (ExportError, PresetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except RuntimeError as exc:  # TensorBoardMissing
        print(f"error: --tensorboard: {exc}", file=sys.stderr)
        return EXIT_INVALID
    progress = Progress(sum(len(STAGES[key]) for key in ["run", *outs]), getattr(args, "progress", False))
    _Cancel.asked = False
    try:
        previous = signal.signal(signal.SIGTERM, _cancel_on_sigterm)
    except ValueError:  # not the main thread (run_export called from a program): no cancelling by SIGTERM
        previous = None
    try:
        progress.stage(STAGES["run"][0])
        events = rundir.read_events(run_dir)
        if needs_model:
            from engine.hub.access import go_offline_if_unreachable, hub_ids_of

            go_offline_if_unreachable(hub_ids_of(preset, run_dir))  # before the hub libraries load
            if args.quiet:  # transformers' "Loading weights" and "Writing model shards" bars too
                from engine.model.loading import quiet_progress_bars

                quiet_progress_bars()
        if "--adapter" in outs:
            export_adapter(preset, run_dir, checkpoint, outs["--adapter"], events, progress)
            print(f"adapter ({checkpoint.name}): {outs['--adapter']}  "
                  "(PeftModel.from_pretrained(base_model, FOLDER))", flush=True)
        if "--merged" in outs:
            export_merged(preset, run_dir, checkpoint, outs["--merged"], events, args.quiet, progress)
            loads = ("AutoModelForSequenceClassification" if export_head(preset) == "score"
                     else "AutoModelForCausalLM")
            print(f"merged model ({checkpoint.name}): {outs['--merged']}  ({loads}.from_pretrained(FOLDER))",
                  flush=True)
        if "--tensorboard" in outs:
            count = export_tensorboard(events, outs["--tensorboard"], args.quiet, progress)
            print(f"tensorboard ({count} summaries from {len(events)} events): {outs['--tensorboard']}  "
                  f"(tensorboard --logdir {outs['--tensorboard']})", flush=True)
        progress.finish()
    except Cancelled:
        print("error: export cancelled (SIGTERM); the output being written was removed", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:  # loading or writing failed: say what, no traceback
        print(f"error: {failure_message(exc)}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return EXIT_OK


def add_export_parser(sub):
    """The `export` sub-command and its arguments (engine/cli.py sets what it runs)."""
    p = sub.add_parser("export", help="export a run: its adapter, a merged model, its metrics for TensorBoard")
    p.add_argument("run_dir")
    p.add_argument("--checkpoint", metavar="step_N", help="which checkpoint (step_N, step_000050 or N; "
                   "default: the newest complete one)")
    p.add_argument("--adapter", metavar="OUT", help="write the LoRA adapter (peft format), tokenizer and model card")
    p.add_argument("--merged", metavar="OUT", help="write the base model with the adapter merged in (in the base's stored dtype)")
    p.add_argument("--tensorboard", metavar="OUT", help="write the run's events as TensorBoard event files")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--progress", action="store_true", help="print `progress: DONE/TOTAL WHAT` lines on stdout as "
                   "each stage starts (for programs that show progress, like the window)")
    return p
