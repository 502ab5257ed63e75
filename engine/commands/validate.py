"""`rl-engine validate PRESET`: the preset's own checks, then, for what is at hand (a
local folder, or a hub id in the local cache, or any hub id when the hub answers), that
the data and the tokenizer load, the prompts as the chat template makes them, and that
they fit the model's context (with data.environment: the first train rows reset as a run
would, their first observations included). Loads no model weights and writes nothing.

A hub id that is neither cached nor reachable is not an error here (the preset is fine;
the machine lacks the files): it is a note saying how to fetch it.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from engine.distributed.launch import world_size_problems
from engine.run.failures import failure_message
from engine.hub.access import download_hint, go_offline_if_unreachable, hub_ids_of, hub_offline
from engine.preset.schema import load_preset
from engine.model.config import BUILTIN_MODEL
from engine.foundation.errors import PresetError
from engine.run.lineage import RunReferenceError, pin_run_references
from engine.foundation.paths import model_path_problem
from engine.run.reporting import missing_reporter
from engine.foundation.stopping import ctrl_c_counted, sigint_count
from engine.rewards import reward_source_problems
from engine.rl.user_code import try_user_functions
from engine.rl.user_files import source_problems

__all__ = ["validate", "missing_offline"]


def missing_offline(repo_id: str, repo_type: str) -> bool:
    """Offline, and the hub id is not in the local Hugging Face cache."""
    from engine.hub.cache import cached_snapshot

    return hub_offline() and cached_snapshot(repo_id, repo_type) is None


def _unavailable(preset, base_dir: Path) -> list[tuple[str, str]]:
    """(field, note) for each hub id this machine cannot load now."""
    notes = []
    for repo_id in hub_ids_of(preset, base_dir):
        is_model = repo_id == preset.model.name_or_path
        field, kind = ("model.name_or_path", "model") if is_model else ("data.dataset", "dataset")
        if missing_offline(repo_id, kind):
            notes.append((field, f"{repo_id!r} is not in the local Hugging Face cache and the hub cannot be "
                                 f"reached: not checked. Fetch it with {download_hint(repo_id, kind)}"))
    return notes


def _prompt_report(preset, base_dir: Path):
    """Load the data and the tokenizer, template the prompts; (summary, the first prompt as
    the model sees it, the context fit: the longest prompt in tokens and the preset with a
    default max_completion_length cut to fit, engine/algorithms/context_fit.py). ValueError
    naming the reward when one reads a data column the data lacks (engine/rewards/input_checks.py)."""
    from transformers import AutoConfig

    from engine.model.chat import chat_format, template_examples
    from engine.data import load_splits
    from engine.data.demonstrations import load_demonstration_splits
    from engine.rewards.input_checks import reward_field_problems
    from engine.algorithms.context_fit import fit_episodes, fit_prompts
    from engine.model.loading import context_length, load_tokenizer, resolve_model_path, tokenizer_chat_template

    # rows as the algorithm reads them: a demonstration's prompt ends before its answer
    demonstrations = preset.algorithm.trains_on_demonstrations
    train, held_out = (load_demonstration_splits if demonstrations else load_splits)(
        preset.data, preset.training.seed, base_dir)
    fields = reward_field_problems(preset, train + held_out)
    if fields:
        raise ValueError("\n  - ".join(f"{path}: {message}" for path, message in fields))
    path = resolve_model_path(preset.model.name_or_path)
    tokenizer = load_tokenizer(path, preset.model.trust_remote_code)
    fmt = chat_format(preset.model.chat_template, tokenizer_chat_template(tokenizer), preset.data.system_prompt,
                      base_dir)
    config = AutoConfig.from_pretrained(path, trust_remote_code=preset.model.trust_remote_code)
    runner = None
    if preset.data.environment:  # the prompts as the run templates them: with the tools' schemas
        from engine.algorithms.episodes import EpisodeRunner

        runner = EpisodeRunner(preset, fmt, tokenizer, [], base_dir, context_length(config))
        examples = runner.template(train + held_out)
    else:
        pairs = preset.algorithm.trains_on_pairs and preset.data.task is None
        examples = template_examples(train + held_out, fmt, tokenizer, pairs=pairs)
        if demonstrations:  # a plain-text row has no prompt (all of its text is trained on): not templated, as SFT's
            examples = [e if e.prompt == "" else t for e, t in zip(train + held_out, examples)]
    fit = fit_prompts(tokenizer, examples, train + held_out, preset, base_dir, context_length(config),
                      getattr(runner, "tools_tokens", 0))
    if runner is not None:  # the first rows reset as the run would: their first observations must fit too
        fit_episodes(runner, fit.preset)
        fit = replace(fit, longest=max(fit.longest, runner.check_first_rows(train)))
    summary = f"{len(train)} train / {len(held_out)} held-out prompts, chat template: {fmt.source}"
    return summary, examples[0].prompt, fit


def validate(preset_path: str, overrides: list[str], processes: int = 1) -> int:
    """Exit status 0 when valid, 2 when not; what was checked on stdout, problems on stderr.
    `processes`: check the preset can be shared by that many (--nproc-per-node)."""
    try:
        preset = load_preset(preset_path, overrides)
    except PresetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    base_dir = Path(preset_path).resolve().parent
    problems = reward_source_problems(preset.rewards, base_dir)
    problems += source_problems(preset.algorithm, base_dir)  # a loss or estimator of the user's: its file
    if preset.data.environment:  # its file, its class, reset and the tools' signatures (engine/episodes/)
        from engine.episodes.environment import environment_problem

        problem = environment_problem(preset.data.environment, base_dir)
        if problem:
            problems.append(tuple(problem.split(": ", 1)))
    model_problem = model_path_problem(preset.model.name_or_path, base_dir)
    if model_problem:
        problems.append(tuple(model_problem.split(": ", 1)))
    try:  # the runs it stands on (model.start_from, a reward-model run), in the default runs folder
        pin_run_references(preset, Path("runs"), base_dir)
    except RunReferenceError as exc:
        problems += [tuple(p.split(": ", 1)) for p in exc.problems]
    problems += [("processes", p) for p in world_size_problems(preset, processes)]
    missing = missing_reporter(preset.training.report_to)
    if missing:
        problems.append(("training.report_to", missing))
    if problems:
        print(f"error: {preset_path} is invalid:\n" + "\n".join(f"  - {p}: {m}" for p, m in problems), file=sys.stderr)
        return 2
    # The user's own loss or estimator, run once on a tiny synthetic batch (engine/rl/user_code.py).
    ran, failed = try_user_functions(preset.algorithm, base_dir)
    if failed:
        print(f"error: {preset_path} is invalid:\n" + "\n".join(f"  - {p}: {m}" for p, m in failed), file=sys.stderr)
        return 2
    for line in ran:
        print(line)
    go_offline_if_unreachable(hub_ids_of(preset, base_dir))
    notes = _unavailable(preset, base_dir)
    for field, note in notes:
        print(f"note: {field}: {note}")
    if notes:
        print(f"{preset_path}: valid as a preset ({preset.algorithm.name}); data and prompt lengths not checked")
        return 0
    sigints = sigint_count()
    try:
        with ctrl_c_counted():  # a Ctrl-C told from a KeyboardInterrupt of an environment's reset
            summary, first, fit = _prompt_report(preset, base_dir)
    except KeyboardInterrupt:  # a Ctrl-C, or one the preset's own code raised (an environment's reset)
        if sigint_count() != sigints:
            print(f"{preset_path}: validation interrupted (Ctrl-C)", file=sys.stderr)
            return 130
        # (an environment's reset names itself: engine/episodes/environment.py tells the two apart)
        print(f"error: {preset_path} is invalid:\n  - the preset's own code raised KeyboardInterrupt, though no "
              "Ctrl-C was pressed", file=sys.stderr)
        return 2
    except Exception as exc:  # every loading failure is a readable line, never a traceback
        print(f"error: {preset_path} is invalid:\n  - {failure_message(exc)}", file=sys.stderr)
        return 2
    if preset.model.name_or_path != BUILTIN_MODEL:
        print(f"first prompt as the model sees it:\n{first}")
    if fit.note:  # a default max_completion_length cut to the model's context, as the run cuts it
        print(f"note: {fit.note}")
    preset, longest = fit.preset, fit.longest
    line, too_big = _memory_report(preset, longest, processes)
    if too_big:
        print(f"error: {preset_path} is invalid:\n  - {line}", file=sys.stderr)
        return 2
    if line:
        print(line)
    print(f"{preset_path}: valid ({preset.algorithm.name}, {summary}, longest prompt {longest} tokens)")
    return 0


def _memory_report(preset, longest: int, processes: int = 1) -> tuple[str, bool]:
    """The memory estimate's line (engine/model/memory_estimate.py), and whether it exceeds the
    GPU the run would use; ("", False) when the model's config cannot be found. With
    several processes, what each one needs (its share of the batch, its FSDP shard)."""
    import torch

    from engine.hub.cache import cached_snapshot
    from engine.model.memory_estimate import GIB, estimate_for_folder
    from engine.model.loading import resolve_model_path

    path = Path(resolve_model_path(preset.model.name_or_path)).expanduser()
    folder = path if path.is_dir() else cached_snapshot(preset.model.name_or_path, "model")
    wanted = preset.model.device
    cuda = torch.cuda.is_available() and (wanted == "auto" or wanted.startswith("cuda"))
    try:
        estimate = estimate_for_folder(preset, folder, prompt_tokens=longest, device="cuda" if cuda else "cpu",
                                       processes=processes)
    except (TypeError, ValueError, KeyError):
        return "", False
    if not cuda:
        where = "the mps device" if wanted == "mps" else "the CPU"
        each = f" each of {processes} processes:" if processes > 1 else ""
        return f"memory: on {where}:{each} about {estimate.amount()} of RAM ({estimate.breakdown()})", False
    index = int(wanted.partition(":")[2] or torch.cuda.current_device())
    props = torch.cuda.get_device_properties(index)
    has = props.total_memory
    each = f"each of {processes} processes " if processes > 1 else ""
    line = f"memory: {each}{estimate.describe()}; this GPU ({props.name}) has {has / GIB:.1f} GiB"
    if estimate.total <= has:
        return line, False
    return (f"{line}. Lower training.micro_batch_size, set training.gradient_checkpointing: true, lower "
            "algorithm.max_completion_length, or set model.load_in_4bit: true (QLoRA)"), True
