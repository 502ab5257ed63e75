"""Reaching the Hugging Face hub, or knowing that we cannot.

A run names models and data sets by hub id or by folder. Offline, a hub id loads from
the local cache or not at all; without this module an uncached id on a machine without
network spends minutes in retries before failing. So before loading, a run that uses a
hub id checks once (a TCP connect, two seconds at most) whether the hub answers, and if
not switches the hub libraries to offline mode: a cached id loads at once, an uncached
one fails at once, naming the field and the command that fetches it. `HF_HUB_OFFLINE`
set by the user, either way, is obeyed and nothing is probed. Torch-free.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from urllib.parse import urlparse

__all__ = ["hub_offline", "download_hint", "go_offline_if_unreachable", "hub_ids_of"]

log = logging.getLogger(__name__)

_TRUE = {"1", "true", "yes", "on"}
# The hub libraries read these when they are imported (huggingface_hub's constants).
_LIBRARIES = ("huggingface_hub", "datasets", "transformers")


def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE (or HF_DATASETS_OFFLINE) says offline."""
    return any(os.environ.get(name, "").strip().lower() in _TRUE for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def download_hint(repo_id: str, repo_type: str = "dataset") -> str:
    """How to put a hub repository into the local cache on a machine with network.

    Example:
        >>> download_hint("openai/gsm8k")
        '`hf download --repo-type dataset openai/gsm8k` (`huggingface-cli download` with older huggingface_hub) on a machine with network; then it loads offline from the cache'
    """
    flag = " --repo-type dataset" if repo_type == "dataset" else ""
    return (f"`hf download{flag} {repo_id}` (`huggingface-cli download` with older huggingface_hub) "
            "on a machine with network; then it loads offline from the cache")


def hub_ids_of(preset, base_dir=None) -> list[str]:
    """The hub ids a preset loads (model, data set): names that are no local path. A
    model path that looks local but is missing is no hub id either (the hub would only
    say it is not one; engine.preset.paths.model_path_problem says what is wrong)."""
    from engine.foundation.paths import local_or_hub_id
    from engine.foundation.paths import looks_like_local_path

    ids = []
    model = preset.model.name_or_path
    # The built-in names (builtin:tiny, builtin:tiny-tools) are folders in assets/, no hub ids.
    if not model.startswith("builtin:") and not looks_like_local_path(model) and local_or_hub_id(model, base_dir) == model:
        ids.append(model)
    if preset.data.dataset is not None and isinstance(local_or_hub_id(preset.data.dataset, base_dir), str):
        ids.append(preset.data.dataset)
    return ids


def _hub_answers(timeout: float) -> bool:
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def go_offline_if_unreachable(hub_ids: list[str], timeout: float = 2.0) -> bool:
    """When `hub_ids` is not empty, HF_HUB_OFFLINE is not set and the hub does not
    answer, set offline mode for this process. Returns whether the run is offline.
    Must run before the hub libraries are imported (they read the variable then)."""
    if "HF_HUB_OFFLINE" in os.environ or "HF_DATASETS_OFFLINE" in os.environ:
        return hub_offline()
    if not hub_ids or _hub_answers(timeout):
        return False
    already = [name for name in _LIBRARIES if name in sys.modules]
    if already:  # too late for them to see it; say so rather than pretend
        log.warning("the hub does not answer, but %s already loaded: offline mode not set", ", ".join(already))
        return False
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    log.warning("the Hugging Face hub does not answer: %s load from the local cache only (offline mode)",
                ", ".join(hub_ids))
    return True

