"""What the local Hugging Face cache holds: models and data sets already downloaded,
read without loading them (no torch, no transformers), so the workbench can offer them.

A model's parameter count comes from its safetensors headers (an 8-byte little-endian
length, then a JSON table of each tensor's dtype and shape): a few kilobytes read per
file, whatever the model's size. A repo that is damaged or half downloaded is listed
with the reason in `problem`, never raised: one bad folder must not hide the others.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from huggingface_hub import scan_cache_dir
from huggingface_hub.errors import CacheNotFound

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
# Architectures whose class name says they generate text left to right (Qwen2ForCausalLM, GPT2LMHeadModel).
CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")
DATA_SUFFIXES = (".parquet", ".arrow", ".json", ".jsonl", ".csv", ".tsv", ".txt", ".zip", ".gz", ".zst", ".tar")
MAX_HEADER_BYTES = 100_000_000  # a safetensors header is kilobytes to a few megabytes; more means a bad file


@dataclass(frozen=True)
class CachedModel:
    repo_id: str
    size_on_disk: int  # bytes, every cached revision
    snapshot_path: Path | None  # the newest snapshot (refs/main when there is one)
    architecture: str | None = None
    model_type: str | None = None
    parameters: int | None = None  # from the safetensors headers; None when there are none
    has_chat_template: bool = False
    context_length: int | None = None
    is_causal_lm: bool = False
    problem: str | None = None  # why it cannot be used as it is (incomplete download, ...)

    @property
    def usable(self) -> bool:
        """Whether the engine can train it: complete, and a causal language model."""
        return self.problem is None and self.is_causal_lm


@dataclass(frozen=True)
class CachedDataset:
    repo_id: str
    size_on_disk: int
    snapshot_path: Path | None
    subsets: tuple[str, ...] = ()  # top-level folders holding data files (gsm8k: main, socratic)
    files: int = 0
    problem: str | None = None


def hub_cache_dir() -> Path:
    """The hub cache folder, read from the environment now (huggingface_hub reads it once,
    at import, so a later change of HF_HOME would otherwise be missed)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.path.expandvars(os.environ[variable])).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.environ["HF_HOME"])).expanduser() / "hub"
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(cache_home).expanduser() / "huggingface" / "hub"


def human_size(n_bytes: int) -> str:
    """A size on disk as people read it (powers of 1000, as the hub shows sizes).

    >>> human_size(0), human_size(999), human_size(1_234_567), human_size(1_200_000_000)
    ('0 B', '999 B', '1.2 MB', '1.2 GB')
    """
    if n_bytes < 1000:
        return f"{n_bytes} B"
    value = float(n_bytes)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def human_count(n: int) -> str:
    """A parameter count as model cards write it.

    >>> human_count(494_032_768), human_count(1_543_714_304), human_count(800_000), human_count(12_345)
    ('494M', '1.5B', '0.8M', '12,345')
    """
    if n >= 999_500_000:
        return f"{n / 1e9:.1f}B"
    if n >= 100_000_000:
        return f"{n / 1e6:.0f}M"
    if n >= 100_000:
        return f"{n / 1e6:.1f}M"
    return f"{n:,}"


# ------------------------------------------------------------------- reading a snapshot


def safetensors_parameters(path: Path) -> int:
    """The number of values in a safetensors file, from its header alone. Raises
    ValueError for a file that is not safetensors."""
    with open(path, "rb") as file:
        prefix = file.read(8)
        if len(prefix) < 8:
            raise ValueError(f"{path.name} is too short to be a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES:
            raise ValueError(f"{path.name} has an implausible header length ({length} bytes)")
        try:
            header = json.loads(file.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path.name} has an unreadable header: {exc}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path.name} has an unreadable header")
    return sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")


def _weight_files(snapshot: Path) -> list[Path]:
    """The safetensors files holding the model once (a sharded model's index says which:
    some repos also ship a `consolidated.safetensors` copy). Raises ValueError when the
    index names a shard that is not downloaded."""
    index = snapshot / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        missing = [name for name in shards if not (snapshot / name).exists()]
        if missing:
            raise ValueError(f"incomplete download: {len(missing)} of {len(shards)} weight shards missing "
                             f"({missing[0]}, ...)")
        return [snapshot / name for name in shards]
    if (snapshot / "model.safetensors").exists():
        return [snapshot / "model.safetensors"]
    return sorted(snapshot.glob("*.safetensors"))


def _read_json(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} does not hold a JSON object")
    return data


def _has_chat_template(snapshot: Path) -> bool:
    if (snapshot / "chat_template.jinja").exists() or (snapshot / "chat_template.json").exists():
        return True
    try:
        return bool(_read_json(snapshot / "tokenizer_config.json").get("chat_template"))
    except (OSError, ValueError):
        return False


def _context_length(config: dict) -> int | None:
    # Multimodal configs keep the language model's settings in text_config.
    for source in (config, config.get("text_config") or {}):
        for key in CONTEXT_KEYS:
            if isinstance(source.get(key), int) and source[key] > 0:
                return source[key]
    return None


def describe_model(repo_id: str, size_on_disk: int, snapshot: Path) -> CachedModel:
    """What one downloaded model snapshot is; `problem` says what is wrong with it."""
    base = CachedModel(repo_id, size_on_disk, snapshot)
    try:
        config = _read_json(snapshot / "config.json")
    except FileNotFoundError:
        return replace(base, problem="no config.json: the download is incomplete, or this is not a transformers model")
    except (OSError, ValueError) as exc:
        return replace(base, problem=f"config.json cannot be read: {exc}")
    architectures = config.get("architectures") or []
    model_type = config.get("model_type") if isinstance(config.get("model_type"), str) else None
    architecture = str(architectures[0]) if architectures else model_type
    model = replace(base, architecture=architecture, model_type=model_type,
                  has_chat_template=_has_chat_template(snapshot), context_length=_context_length(config),
                  is_causal_lm=any(str(a).endswith(CAUSAL_LM_SUFFIXES) for a in architectures))
    try:
        files = _weight_files(snapshot)
        parameters = sum(safetensors_parameters(f) for f in files) if files else None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return replace(model, problem=f"weights cannot be read: {exc}")
    if parameters is None and not any(p.name.endswith(WEIGHT_SUFFIXES) for p in snapshot.iterdir()):
        return replace(model, problem="no weight files: the download is incomplete")
    return replace(model, parameters=parameters)


def _subsets(snapshot: Path) -> tuple[tuple[str, ...], int]:
    """The top-level folders holding data files ("default" for files at the top or in
    `data/`, the folder the hub uses for a data set's single configuration)."""
    found: set[str] = set()
    data_files = 0
    for path in snapshot.rglob("*"):
        relative = path.relative_to(snapshot)
        if path.is_dir() or relative.parts[0].startswith(".") or not path.name.endswith(DATA_SUFFIXES):
            continue
        data_files += 1
        top = relative.parts[0] if len(relative.parts) > 1 else "default"
        found.add("default" if top == "data" else top)
    return tuple(sorted(found)), data_files


def describe_dataset(repo_id: str, size_on_disk: int, snapshot: Path) -> CachedDataset:
    files = sum(1 for p in snapshot.rglob("*") if not p.is_dir())
    try:
        subsets, data_files = _subsets(snapshot)
        subsets = tuple(declared_configs(snapshot)) or subsets  # the README's names win over folders
    except (OSError, ValueError) as exc:
        return CachedDataset(repo_id, size_on_disk, snapshot, files=files, problem=f"cannot be read: {exc}")
    problem = None if data_files else "no data files (parquet, json, csv, ...): the download is incomplete"
    return CachedDataset(repo_id, size_on_disk, snapshot, subsets, files, problem)


# --------------------------------------------------------------------------- the scan


def _newest_snapshot(repo) -> Path | None:
    revisions = sorted(repo.revisions, key=lambda r: ("main" in r.refs, r.last_modified))
    return revisions[-1].snapshot_path if revisions else None


def _scan(cache_dir: str | Path | None, repo_type: str, describe, empty):
    folder = (Path(cache_dir).expanduser() if cache_dir is not None else hub_cache_dir()).resolve()
    try:
        info = scan_cache_dir(folder)
    except (CacheNotFound, ValueError, OSError):
        return []  # no cache yet (or not a folder): nothing downloaded
    found = []
    for repo in info.repos:
        if repo.repo_type != repo_type:
            continue
        snapshot = _newest_snapshot(repo)
        if snapshot is None:
            found.append(empty(repo.repo_id, repo.size_on_disk, None, problem="no snapshot: nothing downloaded"))
            continue
        try:
            found.append(describe(repo.repo_id, repo.size_on_disk, snapshot))
        except Exception as exc:  # an unforeseen layout must not hide the other repos
            found.append(empty(repo.repo_id, repo.size_on_disk, snapshot, problem=f"{type(exc).__name__}: {exc}"))
    prefix = f"{repo_type}s--"
    # Repos the scan refused (a broken symlink, no snapshots folder): listed with the reason.
    for warning in info.warnings:
        repo_path = _path_in(str(warning), folder, prefix)
        if repo_path is not None:
            repo_id = repo_path.name[len(prefix):].replace("--", "/")
            found.append(empty(repo_id, 0, None, problem=f"damaged cache folder: {warning}"))
    return sorted(found, key=lambda item: item.repo_id.lower())


def _path_in(message: str, folder: Path, prefix: str) -> Path | None:
    """The repo folder a scan warning is about (its message names a path inside it)."""
    for child in folder.iterdir():
        if child.name.startswith(prefix) and (str(child) + os.sep in message or message.endswith(str(child))):
            return child
    return None


def cached_models(cache_dir: str | Path | None = None) -> list[CachedModel]:
    """Every model in the hub cache (default: HF_HUB_CACHE, else HF_HOME/hub, else
    ~/.cache/huggingface/hub), sorted by repo id; [] when there is no cache."""
    return _scan(cache_dir, "model", describe_model, CachedModel)


def cached_datasets(cache_dir: str | Path | None = None) -> list[CachedDataset]:
    """Every data set in the hub cache, sorted by repo id; [] when there is no cache."""
    return _scan(cache_dir, "dataset", describe_dataset, CachedDataset)


def cached_snapshot(repo_id: str, repo_type: str = "model") -> Path | None:
    """The folder of a hub repository's cached snapshot (the one `refs/main` names, else
    the newest), or None when it is not in the cache. No scan: one repository's folder."""
    repo = hub_cache_dir() / f"{repo_type}s--{repo_id.replace('/', '--')}"
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        named = snapshots / ref.read_text(encoding="utf-8").strip()
        if named.is_dir():
            return named
    folders = [p for p in snapshots.iterdir() if p.is_dir()]
    return max(folders, key=lambda p: p.stat().st_mtime) if folders else None


# ------------------------------------------------------- a data set's files in a snapshot
# Offline, `datasets` reads only its own prepared Arrow cache, never the hub cache that
# `hf download` fills; so the engine reads a snapshot's files itself, found as the hub
# finds them: the README's `configs:`, else the file naming conventions below.

LOADABLE_SUFFIXES = (".parquet", ".arrow", ".json", ".jsonl", ".ndjson", ".csv", ".tsv")
# Split names the conventions recognise in file names; files naming none are all "train",
# as `datasets` does for a folder of unnamed files.
KNOWN_SPLITS = {"train", "training", "test", "testing", "validation", "valid", "val", "dev", "eval", "evaluation"}


def _front_matter(snapshot: Path) -> dict:
    """The YAML block at the top of the repo's README.md ({} when there is none)."""
    try:
        text = (snapshot / "README.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    match = re.match(r"---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|$)", text, re.DOTALL)
    if not match:
        return {}
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise ValueError(f"{snapshot / 'README.md'}: its YAML header cannot be read ({exc})") from None
    return data if isinstance(data, dict) else {}


def declared_configs(snapshot: Path) -> dict[str, dict]:
    """The subsets the README's `configs:` declares, by `config_name` ({} when none are)."""
    configs = _front_matter(snapshot).get("configs")
    if not isinstance(configs, list):
        return {}
    return {str(c.get("config_name", "default")): c for c in configs if isinstance(c, dict)}


def snapshot_subsets(snapshot: Path) -> tuple[tuple[str, ...], str | None]:
    """(every subset, the one used when none is named): the README's configs (the default
    is the one marked `default: true`, else "default", else the only one), else the
    top-level folders holding data files ("default" for files at the top or in data/)."""
    configs = declared_configs(snapshot)
    if configs:
        marked = [name for name, c in configs.items() if c.get("default") is True]
        names = tuple(configs)
    else:
        marked, names = [], _subsets(snapshot)[0]
    if marked:
        return names, marked[0]
    if "default" in names:
        return names, "default"
    return names, names[0] if len(names) == 1 else None


def snapshot_splits(snapshot: Path, subset: str) -> dict[str, list[Path]]:
    """The data files of each split of one subset (one of `snapshot_subsets`)."""
    config = declared_configs(snapshot).get(subset)
    if config is None:
        return _conventional_splits(snapshot, subset)
    folder = snapshot / str(config.get("data_dir", ""))  # data_files' globs are relative to it
    spec = config.get("data_files")
    if spec is None:
        return _conventional_splits(folder, None)
    return {split: _glob(folder, globs) for split, globs in _split_patterns(spec).items()}


def _split_patterns(spec) -> dict[str, list[str]]:
    """`data_files` in its YAML shapes: a glob, a list of globs (both the train split), a
    list of {split, path} with path a glob or a list, or a {split: path} mapping."""
    if isinstance(spec, str):
        return {"train": [spec]}
    if isinstance(spec, dict):
        return {str(k): [v] if isinstance(v, str) else list(v) for k, v in spec.items()}
    out: dict[str, list[str]] = {}
    for entry in spec or []:
        if isinstance(entry, str):
            out.setdefault("train", []).append(entry)
        elif isinstance(entry, dict):
            path = entry.get("path", [])
            out.setdefault(str(entry.get("split", "train")), []).extend([path] if isinstance(path, str) else path)
    return out


def _glob(snapshot: Path, patterns: list[str]) -> list[Path]:
    """The snapshot's files matching any pattern (the hub's globs: `*` within a folder,
    `**` across folders), sorted."""
    files = [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if not p.is_dir()]
    found = set()
    for pattern in patterns:
        rule = re.compile(_glob_regex(str(pattern).lstrip("./")))
        found.update(name for name in files if rule.fullmatch(name))
    return [snapshot / name for name in sorted(found)]


def _glob_regex(pattern: str) -> str:
    """`**/` and `**` across folders, `*` and `?` within one.

    >>> bool(re.fullmatch(_glob_regex("main/train-*"), "main/train-00000-of-00001.parquet"))
    True
    >>> bool(re.fullmatch(_glob_regex("*/train-*"), "a/b/train-0.parquet"))
    False
    """
    table = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
    return "".join(table.get(part) or re.escape(part) for part in re.split(r"(\*\*/|\*\*|\*|\?)", pattern))


def _conventional_splits(folder: Path, subset: str | None) -> dict[str, list[Path]]:
    """The splits of a subset without a declared config: the data files in its folder (for
    "default": at the top and in data/), a split per leading name (train-00000-of-00001
    .parquet, test.jsonl, train/part-0.parquet), all "train" when no name is a split's."""
    if subset == "default":  # files at the top, and data/ as if it were the top
        tops = [(p, p.name) for p in folder.iterdir() if p.is_file()]
        inside = [(p, p.relative_to(folder / "data")) for p in (folder / "data").rglob("*")]
    else:
        root = folder if subset is None else folder / subset
        tops, inside = [], [(p, p.relative_to(root)) for p in root.rglob("*")]
    by_name: dict[str, list[Path]] = {}
    for path, relative in sorted(tops + inside, key=lambda pair: str(pair[0])):
        if not path.is_file() or not path.name.endswith(LOADABLE_SUFFIXES):
            continue
        parts = Path(relative).parts
        head = parts[0] if len(parts) > 1 else re.split(r"[-.]", path.name, maxsplit=1)[0]
        by_name.setdefault(head, []).append(path)
    if not any(name in KNOWN_SPLITS for name in by_name):
        files = sorted(p for paths in by_name.values() for p in paths)
        return {"train": files} if files else {}
    return by_name
