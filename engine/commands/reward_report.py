"""`rl-engine reward-report RUN [--pairs FILE] [--checkpoint STEP] [--policy PRESET] [--json]`:
a reward-model run's report card (engine/reward_report/): accuracy and margins,
calibration, the length baseline and a preflight, each with a verdict and what to try.
Printed as text (or JSON with --json) and written to RUN/reports/, where the window's
report page reads it; progress goes to stderr, the last stdout line of the text form
names the file written. Exit 0 when the report is written (failed checks are in it); 2 for
bad input (one `error:` line); 1 when scoring fails."""

from __future__ import annotations

import argparse
import json
import sys

from engine.run.failures import failure_location, failure_message

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
MARK = {"good": "ok  ", "worrying": "warn", "bad": "BAD ", "skipped": "--  "}


def _bar(fraction: float | None, width: int = 20) -> str:
    return "" if fraction is None else "#" * round(fraction * width)


def format_report(report: dict) -> str:
    """The report card as text: the verdicts, the numbers behind them, the preflight."""
    source = report["source"]
    where = "held-out pairs" if source["kind"] == "held_out" else source["path"]
    out = [f"Reward model report card: {report['run']}",
           f"  checkpoint {report['checkpoint']} (step {report['step']}), {source['pairs']} pairs: {where}", ""]
    for line in report["lines"]:
        out.append(f"[{MARK[line['status']]}] {line['title']}: {line['saw']}")
        if line.get("try"):
            out.append(f"         try: {line['try']}")
    if report.get("accuracy") is not None:
        margin, cal, length = report["margin"], report["calibration"], report["length"]
        out += ["", f"accuracy {report['accuracy']:.1%}   margin mean {margin['mean']:.3f}, "
                    f"median {margin['median']:.3f}", "margins (r_chosen - r_rejected):"]
        top = max(margin["counts"]) or 1
        for low, count in zip(margin["edges"], margin["counts"]):
            out.append(f"  {low:+8.2f}  {count:5d}  {'#' * round(30 * count / top)}")
        out.append(f"calibration: expected calibration error {cal['ece']:.3f}")
        out.append("  predicted  observed  count")
        for b in cal["bins"]:
            if b["count"]:
                out.append(f"  {b['predicted']:9.3f}  {b['observed']:8.3f}  {b['count']:5d}  {_bar(b['observed'])}")
        lm = length["matched_accuracy"]
        out.append(f"length ({length['unit']}): pick-the-longer accuracy {length['longer_accuracy']:.1%} "
                   f"({length['ties']} ties counted half); reward-length r = "
                   + (f"{length['correlation']:+.2f}" if length["correlation"] is not None else "n/a")
                   + f"; accuracy on {length['matched_pairs']} length-matched pairs "
                   + (f"{lm:.1%}" if lm is not None else "n/a"))
    out += ["", "preflight:"]
    for check in report["preflight"]:
        out.append(f"  [{MARK[check['status']]}] {check['title']}: {check['saw']}")
    return "\n".join(out)


def cmd_reward_report(args) -> int:
    from engine.model.loading import quiet_progress_bars
    from engine.reward_report.compute import ReportError, build_report, write_report

    quiet_progress_bars()
    try:
        report = build_report(args.run_dir, args.pairs, args.checkpoint, args.policy, args.device)
        path = write_report(args.run_dir, report, args.pairs)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except Exception as exc:  # one line, and where it happened, never a bare traceback
        print(f"error: the report card failed: {failure_message(exc)} ({failure_location(exc)})", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(report, indent=1, default=str))
        print(f"wrote {path}", file=sys.stderr)
    else:
        print(format_report(report))
        print(f"wrote {path}")
    return EXIT_OK  # a report whose checks fail is still a report: its lines say so


def add_reward_report_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("reward-report", help="a reward-model run's report card: accuracy, calibration, the length "
                                             "baseline and a preflight")
    p.add_argument("run_dir", help="the reward-model run's folder")
    p.add_argument("--pairs", metavar="FILE", help="score this file's preference pairs (prompt, chosen, rejected) "
                                                   "instead of the run's held-out pairs")
    p.add_argument("--checkpoint", metavar="STEP", help="a checkpoint folder or its name (step_000300); default: "
                                                        "the newest")
    p.add_argument("--policy", metavar="PRESET", help="the RL preset that will use it: its model and chat template "
                                                      "are checked against the reward model's")
    p.add_argument("--device", help="cpu, cuda, ... (default: the run's model.device)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_reward_report)
    return p
