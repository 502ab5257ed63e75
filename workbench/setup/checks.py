"""Pre-launch checks beyond the schema: what the engine would otherwise find only after
loading the model. All torch-free: the model's context comes from its config.json and
prompt lengths from its tokenizer.json through the `tokenizers` library.

Each check returns problems as (field path, message) like the schema's, and notes
(field path, text) for things worth saying that do not block a run (a check that
could not be made, say).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from engine.model.chat import FolderTemplater, chat_format, template_examples
from engine.data import Example, load_splits
from engine.distributed.launch import world_size_problems
from engine.hub.access import download_hint
from engine.hub.cache import cached_snapshot
from engine.foundation.limits import context_problem
from engine.rewards.input_checks import reward_field_problems
from engine.data.location import prompt_location
from engine.builtin_model import BUILTIN_MODELS, builtin_model_folder, rebuild_command  # torch-free
from engine.preset.schema import Preset
from engine.foundation.paths import local_or_hub_id, model_path_problem, resolve_data_path
from engine.run.reporting import missing_reporter
from engine.rewards import REWARDS, build_reward, reward_source_problems
from workbench.setup.device import gpu_found, memory_note
from engine.foundation.paths import looks_like_local_path

REPO_ROOT = Path(__file__).resolve().parents[2]

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


# The launch controls (not preset fields: how to launch, not what to train). Problems
# about them are named by the controls' labels, as the form shows them.
PROCESSES, GPUS = "Processes", "GPUs"
MAX_PROCESSES = 64
_GPU_LIST = re.compile(r"^\s*\d+\s*(,\s*\d+\s*)*$")


@dataclass
class CheckResult:
    problems: list[tuple[str, str]] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)
    prompts: list = field(default_factory=list)  # a few training examples, for the preview


def model_folder(name_or_path: str) -> Path | None:
    """The local folder of a model: the built-in one, a folder, or a hub id's snapshot in
    the local Hugging Face cache; None for a hub id that is not here."""
    if name_or_path in BUILTIN_MODELS:
        return builtin_model_folder(name_or_path)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    return None if looks_like_local_path(name_or_path) else cached_snapshot(name_or_path, "model")


class NotAtHand(ValueError):
    """A hub data set that is neither a local folder nor in the local cache: the form
    does not download it (the engine does, when the run starts)."""


def _dataset_at_hand(data, base_dir: Path | None):
    """The data section with a cached hub data set replaced by its snapshot folder (read
    offline, no network from the window); NotAtHand when it is not cached."""
    if data.dataset is None or isinstance(local_or_hub_id(data.dataset, base_dir), Path):
        return data
    snapshot = cached_snapshot(data.dataset, "dataset")
    if snapshot is None:
        raise NotAtHand(f"{data.dataset!r} is not in the local Hugging Face cache: no preview here; the engine "
                        f"fetches it when the run starts, or fetch it now with {download_hint(data.dataset)}")
    return data.model_copy(update={"dataset": str(snapshot)})


def templated(examples: list, model: dict, system_prompt: str | None, base_dir: Path | None) -> tuple[list, str]:
    """The examples' prompts as the model will see them (its chat template, read from its
    folder), and a note on what was done; plain text when the model is not at hand."""
    name, setting = model.get("name_or_path"), model.get("chat_template", "auto")
    folder = model_folder(name) if isinstance(name, str) and name else None
    if folder is None or not isinstance(setting, str):
        return [Example(_as_text(e.prompt), e.fields) for e in examples], ""
    try:
        preview = FolderTemplater(folder)
        fmt = chat_format(setting, preview.chat_template, system_prompt, base_dir)
        note = f"as the model sees them: chat template from {fmt.source}" if fmt.template is not None else ""
        return template_examples(examples, fmt, preview), note
    except Exception as exc:  # a template that fails to render: say so, show the raw prompts
        return ([Example(_as_text(e.prompt), e.fields) for e in examples],
                f"the chat template could not be previewed ({type(exc).__name__}: {exc})")


def _as_text(prompt) -> str:
    """A conversation shown as 'role: content' lines (no template at hand)."""
    if isinstance(prompt, list):
        return "\n".join(f"{m.get('role')}: {m.get('content')}" for m in prompt)
    return prompt


@dataclass(frozen=True)
class ModelInfo:
    folder: Path
    architecture: str
    context_length: int | None
    has_tokenizer: bool


def read_model_info(folder: Path) -> ModelInfo:
    """Architecture and context length from config.json. Raises ValueError with a
    readable message when the folder is not a model."""
    config_path = folder / "config.json"
    if not config_path.exists():
        raise ValueError(f"{folder} has no config.json; is it a Hugging Face model folder?")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {config_path}: {exc}") from None
    context = next((config[k] for k in CONTEXT_KEYS if isinstance(config.get(k), int) and config[k] > 0), None)
    arch = ", ".join(config.get("architectures") or []) or config.get("model_type", "unknown")
    return ModelInfo(folder, arch, context, (folder / "tokenizer.json").exists())


@lru_cache(maxsize=8)
def _tokenizer(path: str, mtime: float):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(path)
    # tokenizer.json may pad a batch to its longest (the built-in model's does) or
    # truncate: each prompt's own length is wanted, as the engine counts it.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def prompt_token_counts(folder: Path, prompts: list[str]) -> list[int]:
    """Each prompt's token count (no special tokens added, as the engine counts)."""
    path = folder / "tokenizer.json"
    tokenizer = _tokenizer(str(path), path.stat().st_mtime)
    return [len(e.ids) for e in tokenizer.encode_batch(prompts, add_special_tokens=False)]


# load_splits of a big task costs tens of milliseconds: cache by what decides the prompts.
_splits_cache: dict[str, tuple] = {}


def _splits(preset: Preset, base_dir: Path | None):
    key = json.dumps([preset.data.model_dump(mode="json"), preset.training.seed, str(base_dir)], sort_keys=True)
    path = resolve_data_path(preset.data.path, base_dir) if preset.data.path else None
    stamp = path.stat().st_mtime if path is not None and path.exists() else None
    hit = _splits_cache.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    data = _dataset_at_hand(preset.data, base_dir)
    try:
        result = load_splits(data, preset.training.seed, base_dir)
    except ValueError as exc:
        if data.dataset == preset.data.dataset:
            raise
        # Read from its cached snapshot, but named as the user wrote it.
        raise ValueError(str(exc).replace(data.dataset, repr(preset.data.dataset))) from None
    if len(_splits_cache) > 16:
        _splits_cache.clear()
    _splits_cache[key] = (stamp, result)
    return result


def prelaunch_checks(preset: Preset, base_dir: Path | None = None, processes: int = 1) -> CheckResult:
    """Problems the engine would report at start-up, found without torch: data that does
    not load, reward options of the wrong type, a custom reward's file or function that
    is missing (the file is read, not run), a reward-model folder that is missing or has
    other than one label, a model folder that is not a model, and prompts plus
    max_completion_length longer than the model's context. Notes include the memory
    estimate for each of `processes` processes."""
    result = CheckResult()

    for index, reward in enumerate(preset.rewards):
        if reward.name not in REWARDS:
            continue
        try:
            build_reward(reward.name, **reward.options)
        except ValueError as exc:
            result.problems.append((f"rewards.{index}.options", str(exc)))
    # A custom reward's file and function (read, never run) and a local reward model's folder.
    result.problems += reward_source_problems(preset.rewards, base_dir)
    missing = missing_reporter(preset.training.report_to)
    if missing:
        result.problems.append(("training.report_to", missing))

    try:
        train, held_out = _splits(preset, base_dir)
    except NotAtHand as exc:
        result.notes.append(("data.dataset", str(exc)))
        return result
    except (ValueError, OSError, KeyError, TypeError) as exc:
        where = ("data.task_options" if preset.data.task is not None
                 else "data.dataset" if preset.data.dataset is not None else "data.path")
        text = str(exc).removeprefix("data.dataset: ")
        if text.startswith("data.num_eval:"):
            where, text = "data.num_eval", text.removeprefix("data.num_eval:").strip()
        result.problems.append((where, text))
        return result
    result.prompts = train[:6]
    # A reward reading a column the data lacks (the engine's validate says the same).
    result.problems += reward_field_problems(preset, train + held_out)

    name = preset.model.name_or_path
    # A missing local path, a symlink loop, a folder with no model files: validate's words.
    path_problem = model_path_problem(name, base_dir)
    if path_problem is not None:
        result.problems.append(("model.name_or_path", path_problem.removeprefix("model.name_or_path: ")))
        return result
    folder = model_folder(name)
    if folder is None:
        if name.startswith("builtin:"):
            result.problems.append(("model.name_or_path", f"unknown built-in model {name!r}; the built-in ones are "
                                    f"{', '.join(BUILTIN_MODELS)}"))
        elif looks_like_local_path(name):
            result.problems.append(("model.name_or_path", f"folder {name} does not exist"))
        else:
            result.notes.append(("model.name_or_path",
                                 f"{name!r} is a Hugging Face hub id, not on disk here: the context-length "
                                 "check is skipped (the engine checks it once the model is loaded)"))
        return result
    if name in BUILTIN_MODELS and not (folder / "config.json").exists():
        result.problems.append(("model.name_or_path", f"the built-in model is missing from {folder}; rebuild it "
                                f"with `{rebuild_command(name)}`"))
        return result
    try:
        info = read_model_info(folder)
    except ValueError as exc:
        result.problems.append(("model.name_or_path", str(exc)))
        return result
    if info.context_length is None:
        result.notes.append(("algorithm.max_completion_length", "the model's config names no context length; not checked"))
        return result
    if not info.has_tokenizer:
        result.notes.append(("algorithm.max_completion_length",
                             f"{folder} has no tokenizer.json; prompt lengths not checked against the context ({info.context_length})"))
        return result
    raw = train + held_out
    examples, _ = templated(raw, preset.model.model_dump(), preset.data.system_prompt, base_dir)
    lengths = prompt_token_counts(folder, [e.prompt for e in examples])
    longest = max(lengths, default=0)
    _rooms[_room_key(preset.model.model_dump(mode="json"), preset.data, preset.training.seed, base_dir)] = \
        info.context_length - longest
    # The engine's own message (engine/preset/limits.py), naming the longest prompt's row.
    problem = context_problem(lengths, preset.algorithm.max_completion_length, info.context_length,
                              where=lambda i: prompt_location(preset.data, base_dir, raw[i]))
    if problem is not None:
        result.problems.append(tuple(problem.split(": ", 1)))
    else:
        result.notes.append(("algorithm.max_completion_length",
                             f"fits: longest prompt {longest} tokens + {preset.algorithm.max_completion_length} "
                             f"<= context {info.context_length}"))
    result.notes += memory_notes(preset, folder, longest, processes)
    return result


def memory_notes(preset: Preset, folder: Path, longest: int, processes: int = 1) -> list[tuple[str, str]]:
    """The memory estimate (engine/model/memory_estimate.py) as a note on micro_batch_size, the
    first knob to turn, leading with the device the run will use (workbench.setup.device:
    model.device, `auto` resolved without torch). With several processes, what each one needs."""
    from engine.model.memory_estimate import estimate_for_folder

    try:
        cpu = estimate_for_folder(preset, folder, prompt_tokens=longest, device="cpu", processes=processes)
        gpu = estimate_for_folder(preset, folder, prompt_tokens=longest, device="cuda", processes=processes)
    except (ValueError, TypeError, KeyError, OSError):
        return []
    note = memory_note(cpu, gpu, preset.model.device, preset.model.dtype, preset.model.load_in_4bit, gpu_found(),
                       processes)
    return [("training.micro_batch_size", note)]


# The room for a completion that the last checks found, by what decides it (_room_key):
# read when the algorithm is switched, which is too soon to count the prompts again (a
# quarter of a second for the 5,200 sort prompts).
_rooms: dict[str, int] = {}


def _room_key(model: dict, data, seed: Any, base_dir: Path | None) -> str:
    return json.dumps([model.get("name_or_path"), model.get("chat_template"), data.model_dump(mode="json"), seed,
                       str(base_dir)], sort_keys=True, default=str)


def completion_room(data: dict, base_dir: Path | None, count: bool = True) -> int | None:
    """The context the longest prompt leaves for a completion (the model's context minus
    the longest prompt's tokens, as prelaunch_checks counts them), from a preset mapping
    whose model and data sections are valid; None when it cannot be told here, or (`count`
    false) when the checks have not counted these prompts yet."""
    from engine.data.config import DataConfig
    from pydantic import ValidationError

    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    name = model.get("name_or_path")
    folder = model_folder(name) if isinstance(name, str) and name else None
    try:
        cfg = DataConfig.model_validate(data.get("data") or {})
        seed = (data.get("training") or {}).get("seed", 0)
        seed = seed if isinstance(seed, int) else 0
        key = _room_key(model, cfg, seed, base_dir)
        if key in _rooms or not count:
            return _rooms.get(key)
        info = read_model_info(folder) if folder is not None else None
        if info is None or info.context_length is None or not info.has_tokenizer:
            return None
        train, held_out = _splits_for(cfg, seed, base_dir)
        examples, _ = templated(train + held_out, model, cfg.system_prompt, base_dir)
        lengths = prompt_token_counts(info.folder, [e.prompt for e in examples])
    except (ValueError, ValidationError, OSError, KeyError, TypeError):
        return None
    if len(_rooms) > 16:
        _rooms.clear()
    _rooms[key] = info.context_length - max(lengths, default=0)
    return _rooms[key]


def preview_prompts(data: dict, seed: Any, base_dir: Path | None, count: int = 6,
                    model: dict | None = None) -> tuple[list, str]:
    """A few training examples of the data section, even while other sections of the
    preset are invalid, their prompts as `model` (the preset's model section) will see
    them. Returns (examples, a note or "") or ([], the reason there are none)."""
    from engine.data.config import DataConfig
    from engine.foundation.errors import PresetError
    from pydantic import ValidationError

    try:
        cfg = DataConfig.model_validate(data)
    except ValidationError:
        return [], "no preview until the data fields are valid"
    try:
        train, _ = _splits_for(cfg, seed if isinstance(seed, int) else 0, base_dir)
    except (ValueError, OSError, KeyError, TypeError, PresetError) as exc:
        return [], str(exc)
    examples, note = templated(train[:count], model or {}, cfg.system_prompt, base_dir)
    return examples, note


def _splits_for(cfg, seed: int, base_dir: Path | None):
    preset = Preset.model_construct(data=cfg, training=Preset.model_fields["training"].default_factory().model_copy(
        update={"seed": seed}))
    return _splits(preset, base_dir)


# ------------------------------------------------------------------ launch controls


def gpu_list(text: str) -> str:
    """The GPUs field as `--gpus` takes it; ValueError when it is not a list of GPU numbers.

    >>> gpu_list(" 0, 1 "), gpu_list("")
    ('0,1', '')
    """
    if not text.strip():
        return ""
    if not _GPU_LIST.match(text):
        raise ValueError(f"{GPUS}: {text.strip()!r} is not a list of GPU numbers; write them comma-separated, "
                         "e.g. 0,1 (or leave the field empty for every visible GPU)")
    numbers = [part.strip() for part in text.split(",")]
    twice = sorted({n for n in numbers if numbers.count(n) > 1}, key=int)
    if twice:
        raise ValueError(f"{GPUS}: GPU {', '.join(twice)} is listed more than once in {text.strip()!r}; "
                         "name each GPU once, e.g. 0,1")
    return ",".join(str(int(n)) for n in numbers)


def launch_problems(preset: Preset | None, processes: int, gpus: str) -> list[tuple[str, str]]:
    """What keeps the run from launching in `processes` processes on the GPUs `gpus` (the
    field's text), as (path, message): engine.distributed.launch's world-size checks (a
    message about a preset field goes to that field, the others to Processes), a GPUs
    text that is not a list of numbers, fewer GPUs listed than processes on CUDA.
    `preset` None (the schema refused it): the GPUs text alone is checked."""
    problems: list[tuple[str, str]] = []
    try:
        listed = gpu_list(gpus)
    except ValueError as exc:
        problems.append((GPUS, str(exc).removeprefix(f"{GPUS}: ")))
        listed = ""
    if not 1 <= processes <= MAX_PROCESSES:
        problems.append((PROCESSES, f"{processes} processes: give 1 to {MAX_PROCESSES}"))
        return problems
    if preset is None or processes <= 1:
        return problems
    for message in world_size_problems(preset, processes):
        field_path, _, rest = message.partition(": ")
        if rest and re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", field_path):
            problems.append((field_path, rest))
        else:
            problems.append((PROCESSES, message))
    count = len(listed.split(",")) if listed else 0
    if 0 < count < processes and preset.model.device not in ("cpu", "mps"):
        problems.append((GPUS, f"{count} GPU{'s' if count > 1 else ''} listed for {processes} processes: on CUDA "
                               f"each process takes one GPU (--nproc-per-node {processes} --gpus {listed}); list "
                               f"{processes} GPUs, or set Processes to {count}"))
    return problems
