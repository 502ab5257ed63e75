"""`rl-engine`: run, resume and validate experiments headless.

    rl-engine run PRESET [--run-dir DIR] [--set key=value ...] [--nproc-per-node N [--gpus 0,1]]
    rl-engine resume RUN_DIR [--nproc-per-node N]
    rl-engine validate PRESET [--set key=value ...] [--nproc-per-node N]
    rl-engine try-reward PRESET --prompt TEXT --completion TEXT [--field NAME=VALUE ...] [--set key=value ...]
    rl-engine export RUN_DIR [--checkpoint step_N] [--adapter OUT] [--merged OUT] [--tensorboard OUT]
    rl-engine fork RUN_DIR [--checkpoint step_N] [--run-dir NEW] [--set key=value ...] [--nproc-per-node N]
    rl-engine try RUN_DIR [--checkpoint step_N|last] [--prompt TEXT | --held-out I] [--greedy | --samples K] [--json]
    rl-engine score-rewards REQUEST.json|-   (the reward playground's scoring: JSON in, JSON out)

Stop a run with a `stop` line on stdin, SIGTERM or SIGINT: the current step finishes,
a checkpoint is saved, run_finished (stopped) is written and the exit status is 0. A
stop during set-up (model loading, data building) ends the run at once: run_finished
(stopped, during_setup), nothing to checkpoint, exit 0. A second Ctrl-C aborts at
once: run_failed (aborted), exit 1. See engine/foundation/stopping.py.

With --nproc-per-node N this process is a launcher: torchrun starts N workers (this
same CLI, one a rank; engine/distributed/launch.py), and rank 0 writes the run folder.
"""

from __future__ import annotations

import argparse
import os
import sys

from engine.commands.train import cmd_fork, cmd_resume, cmd_run, end_interrupted, unwatch, watch_process
from engine.foundation.stopping import STARTING, StopDuringSetup, StopFlag


def cmd_validate(args) -> int:
    """Check the preset, and where the model and data are at hand, that they load and fit
    (engine/commands/validate.py). Writes nothing."""
    from engine.commands.validate import validate

    return validate(args.preset, args.set, args.nproc_per_node or 1)


def cmd_export(args) -> int:
    """A run's checkpoint as a peft adapter folder or a merged model, its events as
    TensorBoard files (engine/commands/export.py). Exit 0; 2 for bad input; 1 when writing fails."""
    from engine.commands.export import run_export

    return run_export(args)


def add_process_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc-per-node", type=int, default=0, metavar="N",
                   help="train in N processes on this machine under torchrun (one a GPU on CUDA; gloo on a CPU)")
    p.add_argument("--gpus", default="", metavar="LIST",
                   help="the GPUs the processes use, e.g. 0,1 (sets CUDA_VISIBLE_DEVICES)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rl-engine", description="RL Workbench's headless training engine.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="train from a preset")
    p.add_argument("preset", help="preset YAML file")
    p.add_argument("--run-dir", help="where to write the run (default: runs/NAME-TIMESTAMP)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a preset field, e.g. --set training.max_steps=50")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_process_arguments(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("resume", help="continue a run from its last complete checkpoint (a run killed, stopped or "
                                      "failed before its first one: from step 0 again, in its folder)")
    p.add_argument("run_dir")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field, e.g. --set training.max_steps=400 to train longer")
    p.add_argument("--quiet", action="store_true")
    add_process_arguments(p)
    p.set_defaults(func=cmd_resume)
    p = sub.add_parser("validate", help="check a preset; writes nothing")
    p.add_argument("preset")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--nproc-per-node", type=int, default=0, metavar="N",
                   help="also check that N processes can share each step")
    p.set_defaults(func=cmd_validate)
    from engine.commands.try_reward import add_try_reward_parser

    add_try_reward_parser(sub)  # try-reward: one completion through the preset's rewards (engine/commands/try_reward.py)
    from engine.commands.export import add_export_parser

    add_export_parser(sub).set_defaults(func=cmd_export)
    from engine.commands.fork import add_fork_parser

    add_fork_parser(sub).set_defaults(func=cmd_fork)
    from engine.commands.score_rewards import add_playground_parser

    from engine.commands.evaluate import add_eval_parser
    from engine.commands.reward_report import add_reward_report_parser

    add_eval_parser(sub)  # eval: pass@k, maj@k and best-of-N, base against checkpoints (engine/commands/evaluate.py)

    from engine.commands.try_model import add_try_parser

    add_try_parser(sub)  # try: a prompt answered by the base and a checkpoint (engine/commands/try_model.py)
    add_reward_report_parser(sub)  # reward-report: a reward-model run's report card (engine/commands/reward_report.py)
    add_playground_parser(sub)  # score-rewards: the reward playground's scoring (engine/commands/score_rewards.py)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    stop = previous = None
    if argv[:1] in (["run"], ["resume"], ["fork"]):
        # First thing, before anything heavy is imported: a SIGTERM in the engine's first
        # seconds is recorded, and the run folder still gets its final event.
        stop = StopFlag(phase=STARTING)
        previous = watch_process(stop)
    try:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (KeyboardInterrupt, StopDuringSetup) as exc:
        if stop is None:
            raise
        return end_interrupted(stop, exc)
    finally:
        if stop is not None:
            unwatch(stop, previous)


if __name__ == "__main__":
    sys.exit(main())
