"""What the processes of a run leave for each other in the run directory: which process
each rank is (ranks.json, for the launcher), and why a rank other than 0 failed
(rank_N.failed.json), so that rank 0, which writes run_failed, can name the rank
whose fault ended the run rather than only the broken connection it saw.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from engine.distributed.launch import RANKS_FILE, alive

__all__ = ["write_ranks", "write_rank_failure", "root_cause", "rank_log_file"]


def _write_atomic(path: Path, data) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def rank_log_file(rank: int) -> str:
    """The log of a rank other than 0 (rank 0 writes engine.log)."""
    return f"engine.rank{rank}.log"


def write_ranks(run_dir: Path, processes: list[tuple[str, int]]) -> None:
    _write_atomic(Path(run_dir) / RANKS_FILE, [{"rank": r, "host": h, "pid": p} for r, (h, p) in enumerate(processes)])


def write_rank_failure(run_dir: Path, rank: int, message: str, error_type: str) -> None:
    _write_atomic(Path(run_dir) / f"rank_{rank}.failed.json",
                  {"rank": rank, "message": message, "error_type": error_type, "time": time.time()})


def root_cause(run_dir: Path, processes: list[tuple[str, int]], wait_s: float = 3.0) -> dict | None:
    """Which other rank ended the run, seen from rank 0 after a collective failed: one
    that wrote why it failed (waited for up to `wait_s`: it may still be writing), else
    one on this machine whose process is gone. None when no other rank is to blame.
    Returns {"rank", "message"}."""
    deadline = time.monotonic() + wait_s
    host = socket.gethostname()
    while True:
        failed = sorted(Path(run_dir).glob("rank_*.failed.json"))
        if failed:
            info = json.loads(failed[0].read_text())
            return {"rank": info["rank"], "message": f"rank {info['rank']} failed: {info['message']}"}
        for rank, (h, pid) in enumerate(processes):
            if rank and h == host and not alive(pid):
                return {"rank": rank, "message": (
                    f"rank {rank} (pid {pid}) died without a word (killed, or out of host memory); "
                    "the other processes stopped")}
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)
