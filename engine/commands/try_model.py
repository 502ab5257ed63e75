"""`rl-engine try RUN [--checkpoint step_N|last] [--prompt TEXT | --held-out I] [--greedy | --samples K
[--temperature T] [--seed S] | --completion TEXT] [--max-new-tokens N] [--json] [--progress]`: one prompt
answered by the run's base model and by one of its checkpoints, side by side, each answer's tokens scored
under both models; or, with --completion, one GIVEN answer (an evaluation's sample) scored under both.

The base is what evaluate.py calls it: the run's starting model (the base with the adapters the
run stands on merged, and a fresh adapter, which changes nothing). Both models are the run's
trainer (engine/commands/train.py's build_trainer), the checkpoint's adapter loaded into it, so
the prompt goes through the preset's chat template and system prompt as in training, and a preset
with data.environment runs its episodes with the same tool code (the tool tokens are marked, and
get no logprob: no model wrote them).

Each answer's tokens get their logprob under the model that wrote them, under the other model,
and the log-ratio log p_checkpoint - log p_base (the same sign on both sides): where training
made a token more (> 0) or less (< 0) likely; its mean over the checkpoint's own tokens is
an estimate of KL(checkpoint || base). The logprobs are the models' own distributions
(temperature 1), whatever temperature sampled the answer. Both models sample with the same
seed. Writes nothing; --json prints one JSON object (its fields in docs/workbench.md's
"Try a checkpoint"). Exit 0; 2 for bad input (one `error:` line).

--completion TEXT samples nothing: the text is tokenized as DPO's given answers are
(Policy.encode_answer: the end token added, as a finished answer ends, unless the text is
`max_new_tokens` tokens or more, as a sampled answer cut at the length limit ends without one),
and both models score those same tokens. The report keeps its shape (both `models` hold the
one answer, each side's `logprob` under its own model) with `given: true` and the `completion`.
A preset with data.environment is refused: a given text cannot tell the tools' tokens from the
model's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from engine.foundation.errors import PresetError
from engine.run import rundir

EXIT_OK, EXIT_INVALID = 0, 2
VERSION = 1
BASE = "base"


class TryError(ValueError):
    """Bad input: one line naming the option and the fix."""


@dataclass
class Request:
    """What to try, checked before any model loads."""

    run_dir: Path
    preset: object
    checkpoint: Path
    prompt: str | None  # typed; or None with `held_out`
    held_out: int | None
    greedy: bool
    samples: int
    temperature: float | None  # None: the preset's
    seed: int
    completion: str | None = None  # a given answer, scored instead of sampled
    raw_prompt: object = None  # the data's prompt of a held-out one
    answer: object = None  # the held-out prompt's expected answer, when the data has one


def checkpoint_of(run_dir: Path, name: str) -> Path:
    """The run's complete checkpoint `name` (`last`: the newest).

    A run without one, or without that one, is a TryError naming those it has."""
    found = {c.name: c.resolve() for c in rundir.complete_checkpoints(run_dir)}
    if not found:
        raise TryError(f"--checkpoint: run {run_dir.name} has no complete checkpoint yet; let it reach "
                       "training.save_steps, or try another run")
    if name == "last":
        return found[sorted(found, key=lambda n: int(n.split("_")[-1]))[-1]]
    if name not in found:
        raise TryError(f"--checkpoint: run {run_dir.name} has no checkpoint {name} (it has: "
                       f"{', '.join(sorted(found))}); give last or one of those")
    return found[name]


def plan_try(args) -> Request:
    """The request, its inputs checked (TryError or PresetError)."""
    from engine.data import load_splits
    from engine.preset.schema import load_preset

    run_dir = Path(args.run)
    if not (run_dir / rundir.PRESET_FILE).is_file():
        raise TryError(f"{run_dir} is not a run folder (it has no {rundir.PRESET_FILE}); give a folder under runs/")
    if args.prompt is None and args.held_out is None:
        raise TryError("give --prompt TEXT (a prompt of your own) or --held-out I (the run's I-th held-out prompt)")
    if args.prompt is not None and args.held_out is not None:
        raise TryError("--prompt and --held-out: give one of them")
    if args.prompt is not None and not args.prompt.strip():
        raise TryError("--prompt: the prompt is empty; type some text, or pick a held-out prompt with --held-out I")
    sampled = args.samples is not None or args.temperature is not None or args.seed is not None
    if args.completion is not None and (args.greedy or sampled):
        raise TryError("--completion scores the answer given and samples none; leave out --greedy, --samples, "
                       "--temperature and --seed, or leave out --completion to sample")
    if args.completion is not None and not args.completion:
        raise TryError("--completion: the answer is empty; give the text to score (leave it out to sample answers)")
    if args.greedy and sampled:
        raise TryError("--greedy decodes one answer, the most likely token each time; leave out --samples, "
                       "--temperature and --seed, or leave out --greedy to sample")
    samples = 1 if args.samples is None else args.samples
    if not 1 <= samples <= 64:
        raise TryError(f"--samples: {samples} answers a model; give 1 to 64")
    if args.temperature is not None and not 0 < args.temperature <= 10:
        raise TryError(f"--temperature: {args.temperature}; give a number above 0 (1 samples the model as it is)")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise TryError(f"--max-new-tokens: {args.max_new_tokens}; give at least 1")
    sets = list(args.set) + ([f"algorithm.max_completion_length={args.max_new_tokens}"]
                             if args.max_new_tokens is not None else [])
    preset = load_preset(run_dir / rundir.PRESET_FILE, sets)
    if preset.algorithm.trains_score_head:
        raise TryError(f"{run_dir.name} trains a reward model, which scores answers and writes none; its report "
                       "card is `rl-engine reward-report`")
    if args.completion is not None and preset.data.environment:
        raise TryError(f"--completion: run {run_dir.name}'s episodes use tools (data.environment "
                       f"{preset.data.environment}), and a given text cannot tell the tools' tokens from the model's; "
                       "leave out --completion to sample the episodes")
    checkpoint = checkpoint_of(run_dir.resolve(), args.checkpoint)
    request = Request(run_dir.resolve(), preset, checkpoint, args.prompt, args.held_out, not sampled, samples,
                      args.temperature, preset.training.seed if args.seed is None else args.seed, args.completion)
    if args.held_out is not None:
        _train, held_out = load_splits(preset.data, preset.training.seed, run_dir.resolve())
        if not 0 <= args.held_out < len(held_out):
            raise TryError(f"--held-out: {args.held_out} is out of range; run {run_dir.name} holds out "
                           f"{len(held_out)} prompts (0 to {len(held_out) - 1})" if held_out else
                           f"--held-out: run {run_dir.name} holds out no prompts (data.num_eval is 0); type one "
                           "with --prompt")
        request.raw_prompt = held_out[args.held_out].prompt
        request.answer = held_out[args.held_out].fields.get("answer")
    return request


# ------------------------------------------------------------------ the models


class Models:
    """The run's trainer, its adapter switched between the base and the checkpoint (as
    evaluate.py's Sampler does)."""

    def __init__(self, request: Request):
        from peft import get_peft_model_state_dict
        from peft.utils import load_peft_weights

        from engine.commands.train import build_trainer

        self.trainer = t = build_trainer(request.preset, request.run_dir, preset_dir=request.run_dir)
        if request.temperature is not None:
            t.policy.sampling = replace(t.policy.sampling, temperature=request.temperature)
        self.weights = {BASE: {k: v.clone() for k, v in get_peft_model_state_dict(t.model).items()},
                        request.checkpoint.name: load_peft_weights(str(request.checkpoint), device=str(t.device))}

    def use(self, name: str) -> None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.trainer.model, self.weights[name])

    def prompt(self, request: Request):
        """The templated prompt and its data columns (a typed prompt has none)."""
        from engine.data import Example

        t = self.trainer
        if request.held_out is not None:
            example = t.eval_examples[request.held_out]
        else:
            typed = [Example(request.prompt, {})]
            example = (t.episodes.template(typed) if t.episodes else t.template_data(typed))[0]
        return example.prompt, dict(example.fields)

    def sample(self, name: str, prompt: str, fields: dict, request: Request):
        """`name`'s answers to the prompt: (the rollout, their text)."""
        t = self.trainer
        self.use(name)
        t.random_states.sample_generator.manual_seed(request.seed)  # both models draw from the same stream
        k = request.samples
        return t.sample_batch([prompt] * k, k, greedy=request.greedy,
                              fields={key: [v] * k for key, v in fields.items()})

    def given(self, prompt: str, request: Request):
        """The given answer as a one-row rollout after the prompt, tokenized as DPO's given
        answers are: (the rollout, its text as the rewards would read it). TryError when it
        is longer than the answer length limit."""
        policy = self.trainer.policy
        room = request.preset.algorithm.max_completion_length
        count = len(self.trainer.tokenizer(request.completion, add_special_tokens=False)["input_ids"])
        if count > room:
            raise TryError(f"--completion: the answer is {count} tokens, over the {room} an answer may have "
                           "(--max-new-tokens, the preset's algorithm.max_completion_length); raise --max-new-tokens")
        answer = policy.encode_answer(request.completion, room)
        rollout = policy.id_rows([self.trainer.tokenizer(prompt, add_special_tokens=False)["input_ids"]], [answer])
        rollout.truncated[0] = answer[-1] not in set(policy.loaded.eos_token_ids)  # cut at the limit: no end token
        return rollout, policy.decode_completions(rollout)

    def logprobs(self, name: str, rollout):
        """`name`'s logprobs of every token of the rollout (temperature 1). (K, T) float32"""
        import torch

        from engine.algorithms.policy import set_update_mode
        from engine.model.forward import completion_logits

        self.use(name)
        model = self.trainer.model
        set_update_mode(model, False)
        with torch.no_grad():
            logits = completion_logits(model, rollout, slice(0, rollout.completion_ids.shape[0]), 1,
                                       shared_prefix=False, temperature=1.0)
            return logits.logprobs(rollout.completion_ids).float()


# ------------------------------------------------------------------ the answers


def token_rows(tokenizer, rollout, texts: list[str], own, other, own_is_base: bool) -> list[dict]:
    """Each answer of a rollout: its tokens (text pieces as the inspector shows them) and,
    per token, its logprob under the model that wrote it (`own`), under the other, and
    log p_checkpoint - log p_base. A tool's token (an episode's) has none: no model wrote it."""
    out = []
    lengths = rollout.lengths.long().tolist()
    tool = rollout.tool_mask
    for row, n in enumerate(lengths):
        ids = rollout.completion_ids[row, :n].tolist()
        is_tool = [bool(v) for v in tool[row, :n].tolist()] if tool is not None else [False] * n
        mine = [None if is_tool[i] else float(own[row, i]) for i in range(n)]
        theirs = [None if is_tool[i] else float(other[row, i]) for i in range(n)]
        ratio = [None if a is None else (b - a if own_is_base else a - b) for a, b in zip(mine, theirs)]
        scored = [r for r in ratio if r is not None]
        out.append({"text": texts[row], "token_ids": ids, "tokens": [tokenizer.decode([i]) for i in ids],
                    "logprob": mine, "other_logprob": theirs, "log_ratio": ratio,
                    "tool": is_tool if tool is not None else None,
                    "truncated": bool(rollout.truncated[row]),
                    "sum_logprob": sum(v for v in mine if v is not None),
                    "sum_other_logprob": sum(v for v in theirs if v is not None),
                    "mean_log_ratio": sum(scored) / len(scored) if scored else None})
    return out


def _check_fits(trainer, prompt: str, request: Request, given: int | None = None) -> None:
    """A typed prompt and the answer's length (`given`: a given answer's tokens) within the
    model's positions (the trainer checked the data's prompts only)."""
    limit = trainer.policy.loaded.context_length
    tokens = len(trainer.tokenizer(prompt, add_special_tokens=False)["input_ids"])
    room = request.preset.algorithm.max_completion_length if given is None else given
    if limit and tokens + room > limit:
        if given is not None:
            raise TryError(f"--completion: the prompt is {tokens} tokens as templated and the answer {given}, over "
                           f"the {limit} positions the model reads; give a shorter answer")
        raise TryError(f"--prompt: the prompt is {tokens} tokens as templated and an answer up to {room} "
                       f"(--max-new-tokens), over the {limit} positions the model reads; shorten the prompt or "
                       "lower --max-new-tokens")


def try_model(request: Request, progress) -> dict:
    """Both models' answers, each scored under both (or the given answer, scored under
    both); the report --json prints."""
    started = time.perf_counter()
    progress("progress 0/4 loading the model")
    models = Models(request)
    t = models.trainer
    prompt, fields = models.prompt(request)
    given = models.given(prompt, request) if request.completion is not None else None
    _check_fits(t, prompt, request, None if given is None else int(given[0].lengths[0]))
    loaded = time.perf_counter()
    names = [BASE, request.checkpoint.name]
    sampled, seconds = {}, {}
    for number, name in enumerate(names, start=1):
        if given is not None:  # nothing to sample: both "wrote" the given answer
            sampled[name], seconds[name] = given, None
            continue
        progress(f"progress {number}/4 sampling {name}")
        begun = time.perf_counter()
        sampled[name] = models.sample(name, prompt, fields, request)
        seconds[name] = time.perf_counter() - begun
    progress("progress 3/4 scoring the " + ("given answer" if given else "answers") + " under both models")
    scores = {(writer, scorer): models.logprobs(scorer, sampled[writer][0]) for writer in names for scorer in names}
    step = int(request.checkpoint.name.split("_")[-1])
    labels = {BASE: "base (no adapter)", request.checkpoint.name: f"step {step}"}
    out_models = []
    for writer in names:
        other = names[1 - names.index(writer)]
        rollout, texts = sampled[writer]
        out_models.append({"name": writer, "label": labels[writer], "sample_seconds": seconds[writer],
                           "answers": token_rows(t.tokenizer, rollout, texts, scores[(writer, writer)],
                                                 scores[(writer, other)], own_is_base=writer == BASE)})
    progress("progress 4/4 done")
    s = t.policy.sampling
    environment = request.preset.data.environment
    sampling = {"greedy": request.greedy, "samples": request.samples, "temperature": s.temperature,
                "top_p": s.top_p, "top_k": s.top_k, "seed": request.seed}
    if given is not None:  # nothing was sampled: no sampling settings to report
        sampling = {"greedy": False, "samples": 1, "temperature": None, "top_p": None, "top_k": None, "seed": None}
    return {"kind": "try", "version": VERSION, "run": str(request.run_dir), "preset": request.preset.name,
            "checkpoint": request.checkpoint.name, "step": step, "held_out": request.held_out,
            "prompt": request.prompt if request.held_out is None else request.raw_prompt,
            "templated_prompt": prompt, "expected_answer": request.answer,
            "given": given is not None, "completion": request.completion,
            "sampling": {**sampling, "max_new_tokens": request.preset.algorithm.max_completion_length},
            "tools": environment, "logprob_temperature": 1.0, "models": out_models,
            "seconds": {"load": loaded - started, "total": time.perf_counter() - started}}


def format_report(report: dict) -> str:
    """The answers as text: a block a model, each answer with its sums."""
    lines = [f"prompt: {report['templated_prompt']!r}"]
    if report.get("given"):
        lines.append("the answer was given (--completion), not sampled: both models score the same tokens")
    for model in report["models"]:
        lines.append(f"== {model['label']}")
        for answer in model["answers"]:
            ratio = answer["mean_log_ratio"]
            lines.append(f"  {answer['text']!r}  (log p {answer['sum_logprob']:.3f}, under the other "
                         f"{answer['sum_other_logprob']:.3f}, mean log-ratio "
                         f"{'-' if ratio is None else f'{ratio:+.4f}'})")
    return "\n".join(lines)


def cmd_try(args) -> int:
    from engine.model.loading import quiet_progress_bars

    quiet_progress_bars()

    def progress(line: str) -> None:
        if args.progress:
            print(line, file=sys.stderr, flush=True)

    try:
        request = plan_try(args)
        report = try_model(request, progress)
    except (TryError, PresetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except ValueError as exc:  # the trainer's own checks: a prompt longer than the context, a data column missing
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    print(json.dumps(rundir.json_safe(report), ensure_ascii=False) if args.json else format_report(report))
    return EXIT_OK


def add_try_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("try", help="a prompt answered by a run's base model and one of its checkpoints, side by "
                                   "side, each token scored under both")
    p.add_argument("run", help="a run folder")
    p.add_argument("--checkpoint", default="last", help="last (default) or a checkpoint's name, e.g. step_000400")
    p.add_argument("--prompt", help="a prompt of your own (templated as in training)")
    p.add_argument("--held-out", type=int, metavar="I", help="the run's I-th held-out prompt (from 0)")
    p.add_argument("--greedy", action="store_true", help="the most likely token each time (the default)")
    p.add_argument("--samples", type=int, metavar="K", help="sample K answers a model (default 1)")
    p.add_argument("--temperature", type=float, metavar="T", help="sampling temperature (default: the preset's)")
    p.add_argument("--seed", type=int, metavar="S", help="sampling seed (default: the preset's training.seed)")
    p.add_argument("--completion", metavar="TEXT",
                   help="score this answer (e.g. an evaluation's sample) under both models instead of sampling; "
                        "the end token is added unless it is --max-new-tokens tokens long (cut at the limit)")
    p.add_argument("--max-new-tokens", type=int, metavar="N",
                   help="an answer's length limit (default: the preset's algorithm.max_completion_length)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="change a preset field")
    p.add_argument("--json", action="store_true", help="print the answers as one JSON object (the window's)")
    p.add_argument("--progress", action="store_true", help="`progress DONE/4 WHAT` lines on stderr")
    p.set_defaults(func=cmd_try)
    return p
