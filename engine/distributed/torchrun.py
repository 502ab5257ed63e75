"""torchrun, as `python -m engine.distributed.torchrun ARGS` (the launcher starts it so):
torchrun's own main, except that a stop it passed on to the workers ends it with a
line rather than a traceback (the workers finished their step and wrote the run)."""

from __future__ import annotations

import signal
import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.run import main

if __name__ == "__main__":
    try:
        main()
    except SignalException as exc:
        name = signal.Signals(exc.sigval).name
        sys.stderr.write(f"torchrun: {name} passed on to every process; they have stopped\n")
        sys.exit(128 + int(exc.sigval))
