"""The experiment preset: its schema (`schema`: `Preset`, `load_preset`, `preset_from_dict`),
the sections' building blocks (`base`), errors (`errors`), YAML in and out with `--set`
overrides (`io`), guards and bounds (`limits`), relative files (`paths`), the option
checker registries share (`options`) and the checks against a preset's inputs
(`input_checks`). Torch-free: the workbench builds its forms from it. Import from the
submodule that defines a name; this package imports nothing, so that importing one
part never loads the others.
"""
