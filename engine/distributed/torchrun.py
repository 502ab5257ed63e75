"""torchrun, as `python -m engine.distributed.torchrun ARGS` (the launcher starts it so):
torchrun's own main, except that a stop it passed on to the workers ends it with a
line rather than a traceback (the workers finished their step and wrote the run), and
an option this torch's torchrun does not know yet is left out rather than refused."""

from __future__ import annotations

import signal
import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.run import get_args_parser, main

# Options the launcher passes that older torchruns lack, and what happens without them.
# --shutdown-timeout is newer than torch 2.11 (whose torchrun refused it, exit 2): without
# it torchrun gives workers its own fixed grace to finish their step after a stop, then
# kills them (a resume starts from the last checkpoint).
OPTIONAL = ("--shutdown-timeout",)


def known_arguments(argv: list[str], options: set[str]) -> list[str]:
    """argv without the OPTIONAL options (written --name=value) that `options` lacks."""
    unknown = tuple(f"{name}=" for name in OPTIONAL if name not in options)
    return [a for a in argv if not (unknown and a.startswith(unknown))]


if __name__ == "__main__":
    options = {s for action in get_args_parser()._actions for s in action.option_strings}
    sys.argv[1:] = known_arguments(sys.argv[1:], options)
    try:
        main()
    except SignalException as exc:
        name = signal.Signals(exc.sigval).name
        sys.stderr.write(f"torchrun: {name} passed on to every process; they have stopped\n")
        sys.exit(128 + int(exc.sigval))
