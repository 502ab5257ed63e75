"""Several processes, one run: torchrun launches them (engine/distributed/launch.py),
`World` says which one this is and holds the collectives the trainers use
(engine/distributed/world.py), rollouts are gathered so every rank holds the whole
batch (engine/distributed/rollouts.py). docs/architecture.md, "Several processes".
"""
