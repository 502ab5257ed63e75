"""The `rl-engine` subcommands besides run and resume (engine/cli.py): `fork`, `export`,
`validate`, `try-reward` and `score-rewards`, one module each, imported by the CLI when
the command is asked for.
"""
