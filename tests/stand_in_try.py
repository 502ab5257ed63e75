"""The stand-in engine's `try` (tests/stand_in_engine.py hands it `try ARGS`): what `rl-engine
try RUN --json --progress` prints (engine/commands/try_model.py), from hand-written numbers,
for the Try tab's tests (tests/test_try_page.py). No torch, no model.

- four `progress N/4 WHAT` lines on stderr; at 2 of 4 it waits until RUN/go-on exists (the
  test has seen the bar there), up to 10 s;
- then the JSON object on stdout: the base answers " 2 1", the checkpoint " 1 2" (ANSWERS'
  numbers), each token's logprob under the model that wrote it, under the other, and
  log p_checkpoint - log p_base; the prompt echoed as the templated prompt;
- `--held-out I` past 7 (the run holds out 8): the engine's error line, exit 2;
- `--completion TEXT` (a given answer, scored): no wait; both models hold that one answer, a
  token a character and the end token, logprob -0.2 (i + 1) under the base and -0.1 (i + 1)
  under the checkpoint at token i, `given` true; an empty one: the engine's error line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# (tokens, logprob under the base, logprob under the checkpoint) of each model's answer
ANSWERS = {
    "base": ([" ", "2", " ", "1", "<eos>"], [-0.1, -1.2, -0.1, -0.5, -0.05], [-0.1, -2.0, -0.2, -0.5, -0.05]),
    "checkpoint": ([" ", "1", " ", "2", "<eos>"], [-0.1, -1.5, -0.1, -0.9, -0.01], [-0.05, -0.3, -0.05, -0.2, -0.01]),
}
HELD_OUT = ["sort 3 1 2 =", "sort 9 4 =", "sort 5 5 2 =", "sort 8 1 =", "sort 6 2 9 =", "sort 2 7 =", "sort 4 3 =",
            "sort 7 1 ="]


def answer(side: str) -> dict:
    tokens, base, checkpoint = ANSWERS[side]
    own, other = (base, checkpoint) if side == "base" else (checkpoint, base)
    return {"text": "".join(tokens[:-1]), "token_ids": list(range(len(tokens))), "tokens": tokens,
            "logprob": own, "other_logprob": other, "log_ratio": [c - b for b, c in zip(base, checkpoint)],
            "tool": None, "truncated": False, "sum_logprob": sum(own), "sum_other_logprob": sum(other),
            "mean_log_ratio": sum(c - b for b, c in zip(base, checkpoint)) / len(tokens)}


def given(args, run: Path) -> int:
    """The report of a given answer scored under both models."""
    if not args.completion:
        print("error: --completion: the answer is empty; give the text to score (leave it out to sample answers)",
              file=sys.stderr)
        return 2
    for done, what in ((0, "loading the model"), (3, "scoring the given answer under both models")):
        print(f"progress {done}/4 {what}", file=sys.stderr, flush=True)
    tokens = list(args.completion) + ["<eos>"]
    base = [-0.2 * (i + 1) for i in range(len(tokens))]
    checkpoint = [-0.1 * (i + 1) for i in range(len(tokens))]
    ratio = [c - b for b, c in zip(base, checkpoint)]

    def scored(own: list[float], other: list[float]) -> dict:
        return {"text": args.completion, "token_ids": list(range(len(tokens))), "tokens": tokens, "logprob": own,
                "other_logprob": other, "log_ratio": ratio, "tool": None, "truncated": False,
                "sum_logprob": sum(own), "sum_other_logprob": sum(other), "mean_log_ratio": sum(ratio) / len(ratio)}

    step = int(args.checkpoint.split("_")[-1])
    prompt = HELD_OUT[args.held_out] if args.held_out is not None else args.prompt
    report = {"kind": "try", "version": 1, "run": str(run), "preset": "grpo-sort", "checkpoint": args.checkpoint,
              "step": step, "held_out": args.held_out, "prompt": prompt, "templated_prompt": prompt,
              "expected_answer": None, "given": True, "completion": args.completion,
              "sampling": {"greedy": False, "samples": 1, "temperature": None, "top_p": None, "top_k": None,
                           "seed": None, "max_new_tokens": args.max_new_tokens or 16},
              "tools": None, "logprob_temperature": 1.0,
              "models": [{"name": "base", "label": "base (no adapter)", "answers": [scored(base, checkpoint)]},
                         {"name": args.checkpoint, "label": f"step {step}", "answers": [scored(checkpoint, base)]}],
              "seconds": {"load": 0.0, "total": 0.01}}
    print("progress 4/4 done", file=sys.stderr, flush=True)
    print(json.dumps(report))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="stand_in_engine try")
    parser.add_argument("run")
    parser.add_argument("--checkpoint", default="last")
    parser.add_argument("--prompt")
    parser.add_argument("--held-out", type=int)
    parser.add_argument("--greedy", action="store_true")
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--completion")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)
    run = Path(args.run)
    if args.held_out is not None and not 0 <= args.held_out < len(HELD_OUT):
        print(f"error: --held-out: {args.held_out} is out of range; run {run.name} holds out {len(HELD_OUT)} "
              f"prompts (0 to {len(HELD_OUT) - 1})", file=sys.stderr)
        return 2
    if args.completion is not None:
        return given(args, run)
    for done, what in enumerate(("loading the model", "sampling base", f"sampling {args.checkpoint}",
                                 "scoring the answers under both models")):
        print(f"progress {done}/4 {what}", file=sys.stderr, flush=True)
        deadline = time.monotonic() + 10
        while done == 2 and not (run / "go-on").exists() and time.monotonic() < deadline:
            time.sleep(0.01)  # until the test has seen the bar at 2 of 4 (or gives up)
    prompt = HELD_OUT[args.held_out] if args.held_out is not None else args.prompt
    k = 1 if args.greedy else args.samples
    report = {"kind": "try", "version": 1, "run": str(run), "preset": "grpo-sort", "checkpoint": args.checkpoint,
              "step": int(args.checkpoint.split("_")[-1]), "held_out": args.held_out, "prompt": prompt,
              "templated_prompt": prompt, "expected_answer": None,
              "sampling": {"greedy": args.greedy, "samples": k, "temperature": args.temperature or 0.7,
                           "top_p": 1.0, "top_k": 0, "seed": args.seed or 0,
                           "max_new_tokens": args.max_new_tokens or 16},
              "tools": None, "logprob_temperature": 1.0,
              "models": [{"name": "base", "label": "base (no adapter)", "answers": [answer("base")] * k},
                         {"name": args.checkpoint, "label": f"step {int(args.checkpoint.split('_')[-1])}",
                          "answers": [answer("checkpoint")] * k}],
              "seconds": {"load": 0.0, "total": 0.01}}
    print("progress 4/4 done", file=sys.stderr, flush=True)
    print(json.dumps(report))
    return 0
