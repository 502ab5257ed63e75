"""The report card of a reward-model run (`rl-engine reward-report`): its checkpoint
loaded as an RL run would load it (engine/rewards/model.py: base, adapter chain and score
head merged), every pair of its held-out split, or of a preference file, scored the way
the run and the `reward_model` reward score (engine/model/score.py), then the numbers and
verdicts of card.py and the checks of preflight.py. Written as JSON to
RUN/reports/reward-report[-FILE].json, which the window's report page reads
(docs/run-directory.md has the format).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from engine.data.preference import load_preference_splits
from engine.foundation.errors import PresetError
from engine.foundation.run_files import PRESET_FILE, has_score_head, run_preset
from engine.model.chat import answer_text, chat_format, template_examples
from engine.model.loading import tokenizer_chat_template
from engine.model.score import encode_texts, last_token_positions, position_scores
from engine.reward_report import preflight
from engine.reward_report.card import card_numbers, verdict_lines
from engine.run import rundir
from engine.run.failures import NoSuchCheckpoint, named_checkpoint

__all__ = ["ReportError", "build_report", "write_report", "report_path", "REPORTS_DIR", "BATCH"]

REPORTS_DIR = "reports"
REPORT_VERSION = 1
BATCH = 64  # pairs a forward pass


class ReportError(ValueError):
    """Bad input to the report: one line naming what is wrong and the fix."""


def report_path(run_dir: Path, pairs_file: Path | None) -> Path:
    name = "reward-report.json" if pairs_file is None else f"reward-report-{Path(pairs_file).stem}.json"
    return Path(run_dir).resolve() / REPORTS_DIR / name


def _checkpoint(run_dir: Path, given: str | None) -> Path:
    """The run's newest complete checkpoint, or the one `given` names (step_N, N or its
    folder), as fork and export find theirs."""
    try:
        return named_checkpoint(run_dir, given, "to report on").resolve()
    except NoSuchCheckpoint as exc:
        raise ReportError(str(exc)) from None


def _pairs(preset, run_dir: Path, pairs_file: Path | None):
    """The held-out pairs of the run's split, or every pair of `pairs_file` (read with the
    run's column settings)."""
    data = preset.data
    if pairs_file is not None:
        if not Path(pairs_file).is_file():
            raise ReportError(f"--pairs: {pairs_file} is not a file; give a JSONL, JSON, CSV or Parquet file of "
                              "preference pairs (prompt, chosen, rejected)")
        data = data.model_copy(update={"task": None, "dataset": None, "path": str(Path(pairs_file).resolve()),
                                       "num_eval": 0})
    try:
        train, held_out = load_preference_splits(data, preset.training.seed, run_dir, who="the report card")
    except (ValueError, OSError) as exc:
        raise ReportError(str(exc)) from exc
    pairs = train if pairs_file is not None else held_out
    if not pairs:
        raise ReportError("the run holds out no pairs (data.num_eval is 0); give a file of pairs with --pairs")
    return pairs


def _eval_at(run_dir: Path, step: int) -> dict | None:
    found = [e for e in rundir.read_events(run_dir) if e.get("type") == "eval" and e.get("step") == step]
    return found[-1] if found else None


def _policy_problem(policy: str, run_dir: Path, checkpoint: Path) -> str | None:
    from engine.preset.schema import load_preset
    from engine.run.lineage import RunReference, reward_model_problem

    try:
        preset = load_preset(policy)
    except (PresetError, OSError) as exc:
        raise ReportError(f"--policy: {exc}") from exc
    return reward_model_problem("--policy", RunReference(run_dir, checkpoint, run_preset(run_dir)), preset)


@torch.no_grad()
def _score(model, tokenizer, texts: list[str], limit, device, pooling: preflight.PoolingCheck,
           progress: Callable[[str], None]) -> tuple[list[float], dict]:
    """Each text's score, read as the run reads it, in batches; and the reading check of
    the first batch against transformers' own forward."""
    scores, reading = [], None
    for start in range(0, len(texts), 2 * BATCH):
        ids, mask = encode_texts(tokenizer, texts[start:start + 2 * BATCH], limit, device)
        read = last_token_positions(ids, tokenizer.pad_token_id)
        ours = position_scores(model, ids, mask).gather(1, read[:, None]).squeeze(1)
        pooling.add(ids.cpu(), mask.cpu(), read.cpu())
        if reading is None:
            reading = preflight.reading_check(ours.cpu(), model(input_ids=ids, attention_mask=mask).logits[:, 0].cpu())
        scores += ours.float().cpu().tolist()
        progress(f"scoring pairs {min(len(texts), start + 2 * BATCH) // 2}/{len(texts) // 2}")
    return scores, reading


def build_report(run_dir, pairs_file=None, checkpoint: str | None = None, policy: str | None = None,
                 device: str | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """The report card (a JSON-ready dict) of the reward-model run `run_dir` at
    `checkpoint` (its newest when None), on its held-out pairs or `pairs_file`'s.
    ReportError for bad input."""
    from engine.preset.schema import load_preset
    from engine.rewards.base import RewardError
    from engine.rewards.model import load_reward_model

    progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    run_dir = Path(run_dir).resolve()
    if not (run_dir / PRESET_FILE).is_file():
        raise ReportError(f"{run_dir} is not a run folder (it has no {PRESET_FILE}); give a reward-model run's folder")
    try:
        preset = load_preset(run_dir / PRESET_FILE)
    except PresetError as exc:
        raise ReportError(str(exc)) from exc
    ckpt = _checkpoint(run_dir, checkpoint)
    header = {"kind": "reward_report", "version": REPORT_VERSION, "run": str(run_dir), "checkpoint": str(ckpt),
              "step": int(ckpt.name.split("_")[-1]), "created": time.time()}
    if not has_score_head(ckpt):
        head = preflight.head_check(ckpt, None)
        if not preset.algorithm.trains_score_head:
            raise ReportError(f"run {run_dir.name} (algorithm {preset.algorithm.name}) is not a reward model (its "
                              "checkpoints carry no score head); give a run of algorithm.name: reward_model")
        return {**header, "source": {"kind": "file" if pairs_file else "held_out", "path": pairs_file, "pairs": 0},
                "accuracy": None, "preflight": [head], "lines": verdict_lines({"accuracy": None}, 0, [head]),
                "pairs": []}
    problem = _policy_problem(policy, run_dir, ckpt) if policy else None
    pairs = _pairs(preset, run_dir, Path(pairs_file) if pairs_file else None)
    progress(f"loading the reward model from {ckpt}")
    try:
        rm = load_reward_model(str(ckpt), device or preset.model.device, preset.model.dtype, where="reward model")
    except RewardError as exc:
        raise ReportError(str(exc)) from exc
    tokenizer = rm.tokenizer
    chat = chat_format(preset.model.chat_template, tokenizer_chat_template(tokenizer), preset.data.system_prompt,
                       run_dir)
    templated = template_examples(pairs, chat, tokenizer)
    answers = [[answer_text(e.fields[side]) for side in ("chosen", "rejected")] for e in pairs]
    texts = [e.prompt + answer for e, two in zip(templated, answers) for answer in two]
    pooling = preflight.PoolingCheck(tokenizer)
    scores, reading = _score(rm.model, tokenizer, texts, rm.context, rm.device, pooling, progress)
    lengths = [len(tokenizer(answer, add_special_tokens=False)["input_ids"]) for two in answers for answer in two]
    chosen, rejected = scores[0::2], scores[1::2]
    card = card_numbers(chosen, rejected, lengths[0::2], lengths[1::2])
    checks = [preflight.head_check(ckpt, rm.model), pooling.result(), reading, preflight.scores_check(scores)]
    if pairs_file is None:
        finite = [c - r for c, r in zip(chosen, rejected) if math.isfinite(c - r)]
        checks.append(preflight.reproduction_check(_eval_at(run_dir, header["step"]), card["accuracy"],
                                                   sum(finite) / max(1, len(finite)), len(pairs)))
    checks.append(preflight.policy_check(problem, policy))
    source = {"kind": "held_out", "path": None} if pairs_file is None else {
        "kind": "file", "path": str(Path(pairs_file).resolve())}
    return {**header, "source": {**source, "pairs": len(pairs)}, **card, "preflight": checks,
            "lines": verdict_lines(card, len(pairs), checks),
            "pairs": [{"prompt": e.prompt, "chosen": two[0], "rejected": two[1], "reward_chosen": c,
                       "reward_rejected": r, "length_chosen": lc, "length_rejected": lr}
                      for e, two, c, r, lc, lr in zip(pairs, answers, chosen, rejected, lengths[0::2],
                                                      lengths[1::2])]}


def write_report(run_dir, report: dict, pairs_file=None) -> Path:
    """Write `report` to RUN/reports/ (replacing the one of the same source), atomically:
    the window may be reading the folder."""
    path = report_path(Path(run_dir), Path(pairs_file) if pairs_file else None)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.tmp")
    partial.write_text(json.dumps(rundir.json_safe(report), indent=1, allow_nan=False), encoding="utf-8")
    partial.replace(path)
    return path
