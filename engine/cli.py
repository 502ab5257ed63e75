"""`rl-engine`: run, resume and validate experiments headless.

    rl-engine run PRESET [--run-dir DIR] [--set key=value ...]
    rl-engine resume RUN_DIR
    rl-engine validate PRESET [--set key=value ...]
    rl-engine try-reward PRESET --prompt TEXT --completion TEXT [--field NAME=VALUE ...] [--set key=value ...]

Stop a run with a `stop` line on stdin, SIGTERM or SIGINT: the current step finishes,
a checkpoint is saved, run_finished (stopped) is written and the exit status is 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from engine import rundir
from engine.preset import PresetError, load_preset
from engine.rewards import absolute_reward_paths, reward_source_problems

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
_ENGINE_ROOT = Path(__file__).resolve().parent


def user_code_location(exc: BaseException) -> tuple[str, int] | None:
    """File and line of the innermost traceback frame outside the engine, the standard
    library and installed packages: where a fault in the user's own code (a custom
    reward function) happened. None when the fault is not in user code."""
    skip = {_ENGINE_ROOT, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    found = None
    chain = []
    while exc is not None and exc not in chain:  # the engine re-raises user errors with context
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__

    def user_file(filename: str | None) -> Path | None:
        if not filename or filename.startswith("<"):  # <frozen importlib...>, <string>
            return None
        path = Path(filename).resolve()
        if "site-packages" in path.parts or any(root in path.parents for root in skip):
            return None
        return path

    for error in chain:
        for frame, line in traceback.walk_tb(error.__traceback__):
            path = user_file(frame.f_code.co_filename)
            if path is not None:
                found = (str(path), line)
        if isinstance(error, SyntaxError) and error.lineno:
            # A syntax error in the user's file has no frame there: it was never run.
            path = user_file(error.filename)
            if path is not None:
                found = (str(path), error.lineno)
    return found


def failure_message(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "aborted by a second Ctrl-C before the step finished; the last checkpoint is intact"
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, (ValueError, PresetError, RuntimeError, OSError)) and not isinstance(exc, NotImplementedError):
        return text
    return f"{type(exc).__name__}: {text}"


def default_run_dir(preset_name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{preset_name}-{stamp}"


def setup_logging(run_dir: Path) -> None:
    handler = logging.FileHandler(run_dir / rundir.LOG_FILE, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)


def install_stop_handlers(stop) -> None:
    def on_signal(signum, _frame):
        name = signal.Signals(signum).name
        if stop.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: the user does not want to wait
        stop.request(name)
        print(f"\n{name}: stopping after the current step (Ctrl-C again to abort)…", file=sys.stderr)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def read_stdin():
        try:
            for line in sys.stdin:
                if line.strip().lower() == "stop":
                    stop.request("stop requested")
                    return
        except (OSError, ValueError):
            return

    if sys.stdin is not None and not sys.stdin.closed:
        threading.Thread(target=read_stdin, name="stdin-stop", daemon=True).start()


def progress_callback(max_steps: int, start_step: int, quiet: bool):
    if quiet:
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=max_steps, initial=start_step, desc="train", unit="step", dynamic_ncols=True, file=sys.stderr)

    def on_step(step, metrics):
        bar.update(step - bar.n)
        bar.set_postfix(reward=f"{metrics['reward']:.3f}", refresh=False)

    return on_step, bar.close


def train(preset, run_dir: Path, resume_from: Path | None, preset_dir: Path | None, quiet: bool) -> int:
    from engine.trainer import StopFlag, build_trainer

    stop = StopFlag()
    install_stop_handlers(stop)
    events = None
    try:
        trainer = build_trainer(preset, run_dir, stop=stop, preset_dir=preset_dir)
        start = trainer.step
        if resume_from is not None:
            start = json.loads((resume_from / rundir.CHECKPOINT_STATE).read_text())["step"]
        on_step, close = progress_callback(preset.training.max_steps, start, quiet)
        try:
            status = trainer.run(on_step=on_step, resume_from=resume_from)
        finally:
            close()
        print(f"run {status} at step {trainer.step}: {run_dir}", file=sys.stderr)
        return EXIT_OK
    except (Exception, KeyboardInterrupt) as exc:  # every failure is reported in the event stream
        logging.getLogger("engine").error("run failed:\n%s", traceback.format_exc())
        message = failure_message(exc)
        where = user_code_location(exc)
        events = rundir.EventWriter(run_dir)
        fields = {"message": message, "error_type": type(exc).__name__}
        if where:
            fields.update(file=where[0], line=where[1])
        events.emit("run_failed", **fields)
        events.close()
        suffix = f" ({where[0]}:{where[1]})" if where else ""
        print(f"error: {message}{suffix}\nsee {run_dir / rundir.LOG_FILE}", file=sys.stderr)
        return EXIT_FAILED


def cmd_run(args) -> int:
    try:
        preset = load_preset(args.preset, args.set)
    except PresetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(preset.name)
    if (run_dir / rundir.EVENTS_FILE).exists():
        print(f"error: {run_dir} already holds a run; choose a new --run-dir, or `rl-engine resume {run_dir}`",
              file=sys.stderr)
        return EXIT_INVALID
    preset_dir = Path(args.preset).resolve().parent
    if preset.data.path is not None and not Path(preset.data.path).is_absolute():
        # The run's preset.yaml must still find the file when the run is resumed or
        # reopened from elsewhere.
        here = Path(preset.data.path).resolve()
        path = here if here.exists() else preset_dir / preset.data.path
        preset = preset.model_copy(update={"data": preset.data.model_copy(update={"path": str(path)})})
    # Likewise a custom reward's file and a reward model's folder.
    rewards = []
    for reward in preset.rewards:
        name, options = absolute_reward_paths(reward.name, reward.options, preset_dir)
        rewards.append(reward.model_copy(update={"name": name, "options": options}))
    preset = preset.model_copy(update={"rewards": rewards})
    run_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(run_dir)
    return train(preset, run_dir, None, preset_dir, args.quiet)


def cmd_resume(args) -> int:
    run_dir = Path(args.run_dir)
    try:
        preset = load_preset(run_dir / rundir.PRESET_FILE, args.set)
    except PresetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    checkpoints = rundir.complete_checkpoints(run_dir)
    if not checkpoints:
        print(f"error: {run_dir} has no complete checkpoint to resume from", file=sys.stderr)
        return EXIT_INVALID
    setup_logging(run_dir)
    return train(preset, run_dir, checkpoints[-1], run_dir, args.quiet)


def cmd_validate(args) -> int:
    """Check the preset, and where the model and data are at hand, that they load and fit.
    Writes nothing."""
    try:
        preset = load_preset(args.preset, args.set)
    except PresetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    problems = reward_source_problems(preset.rewards, Path(args.preset).resolve().parent)
    if problems:
        print(f"error: {args.preset} is invalid:\n" + "\n".join(f"  - {p}: {m}" for p, m in problems), file=sys.stderr)
        return EXIT_INVALID
    try:
        from transformers import AutoConfig

        from engine.data import load_splits
        from engine.models import check_context_fits, context_length, load_tokenizer, resolve_model_path
        train_examples, eval_examples = load_splits(preset.data, preset.training.seed, Path(args.preset).resolve().parent)
        path = resolve_model_path(preset.model.name_or_path)
        longest = check_context_fits(
            load_tokenizer(path), [e.prompt for e in train_examples + eval_examples],
            preset.algorithm.max_completion_length, context_length(AutoConfig.from_pretrained(path)))
    except Exception as exc:
        print(f"error: {args.preset} is invalid:\n  - {failure_message(exc)}", file=sys.stderr)
        return EXIT_INVALID
    print(f"{args.preset}: valid ({preset.algorithm.name}, {len(train_examples)} train / "
          f"{len(eval_examples)} held-out prompts, longest prompt {longest} tokens)")
    return EXIT_OK


def parse_fields(items: list[str]) -> dict[str, str]:
    """`--field answer=" 1 2 3"` -> {"answer": " 1 2 3"}; the value is kept as written
    (spaces included). PresetError for an item that is not NAME=VALUE."""
    fields, problems = {}, []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            problems.append(f"--field {item!r}: expected NAME=VALUE, e.g. --field answer=' 1 2 3'")
        else:
            fields[key.strip()] = value
    if problems:
        raise PresetError(problems, "--field")
    return fields


def format_reward_table(components, parts: dict[str, list[float]], total: float) -> str:
    """The table try-reward prints: one line per component, then the weighted total.

    component      weight    value  weighted  source
    exact_match         1   1.0000    1.0000
    sort_position     0.5   1.0000    0.5000
    brevity           0.1  -0.5000   -0.0500  my_rewards.py:brevity
    total                             1.4500
    """
    rows = [("component", "weight", "value", "weighted", "source")]
    for label, weight, reward in components:
        value = parts[label][0]
        source = getattr(reward, "reward_source", "") or ""
        rows.append((label, f"{weight:g}", f"{value:.4f}", f"{weight * value:.4f}", source))
    rows.append(("total", "", "", f"{total:.4f}", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:4], widths[1:])]
        lines.append(("  ".join(cells) + ("  " + row[4] if row[4] else "")).rstrip())
    return "\n".join(lines)


def cmd_try_reward(args) -> int:
    """Score one completion with the preset's rewards and print each component and the
    weighted total. Exit 0; 2 for a bad preset, --field or a missing field; 1 when a
    reward fails to load or to score (the message names it, and the file and line of a
    fault in a custom function)."""
    from engine.rewards import MissingFieldError, build_reward_components, combine_rewards

    try:
        preset = load_preset(args.preset, args.set)
        fields = parse_fields(args.field)
    except PresetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    base_dir = Path(args.preset).resolve().parent
    try:
        components = build_reward_components(preset.rewards, device=preset.model.device, base_dir=base_dir)
        totals, parts = combine_rewards(components, [args.prompt], [args.completion],
                                        {k: [v] for k, v in fields.items()})
    except MissingFieldError as exc:
        print(f"error: {failure_message(exc)}\n  give it with --field NAME=VALUE, e.g. --field answer=' 1 2 3'",
              file=sys.stderr)
        return EXIT_INVALID
    except Exception as exc:
        message = failure_message(exc)
        where = user_code_location(exc)
        if where and where[0] not in message:
            message += f" ({where[0]}:{where[1]})"
        print(f"error: {message}", file=sys.stderr)
        return EXIT_FAILED
    print(format_reward_table(components, parts, totals[0]))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rl-engine", description="RL Workbench's headless training engine.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="train from a preset")
    p.add_argument("preset", help="preset YAML file")
    p.add_argument("--run-dir", help="where to write the run (default: runs/NAME-TIMESTAMP)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a preset field, e.g. --set training.max_steps=50")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("resume", help="continue a run from its last complete checkpoint")
    p.add_argument("run_dir")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field, e.g. --set training.max_steps=400 to train longer")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_resume)
    p = sub.add_parser("validate", help="check a preset; writes nothing")
    p.add_argument("preset")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("try-reward", help="score one completion with the preset's rewards; prints each component")
    p.add_argument("preset")
    p.add_argument("--prompt", required=True, help="the prompt, as the policy sees it")
    p.add_argument("--completion", required=True,
                   help="the completion to score (text starting with '-': --completion=-5)")
    p.add_argument("--field", action="append", default=[], metavar="NAME=VALUE",
                   help="a data field the rewards read, e.g. --field answer=' 1 2 3' (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=cmd_try_reward)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
