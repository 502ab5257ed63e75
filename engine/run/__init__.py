"""A run as it lives on disk and reaches its readers: the run directory and its event
stream (`rundir`), per-token records (`trajectories`), where events also go (`reporting`,
`trackers`, `tensorboard_events`), what the CLI prints while training (`progress`), why a
run failed (`failures`) and the stop flag (`stopping`). Torch-free except `trajectories`.
"""
