"""The experiment preset, assembled: `schema` (`Preset` from its sections, each beside
the code it configures, the rules across sections, `load_preset`, `preset_from_dict`)
and `paths` (a preset's relative files made absolute). What the sections are built
from (`Section`, limits, errors, the registry, the path rules, preset files' YAML in
and out) is engine/foundation/'s. Torch-free: the workbench builds its forms from it.
Import from the submodule that defines a name; this package imports nothing.
"""
