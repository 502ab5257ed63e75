"""The set-up form: Qt-free models of the preset being edited beside the Qt views.

Models (no Qt; tests/test_import_graph.py holds them to it):
  schema    the preset schema read into `FieldSpec`s; the algorithms from the union
  document  `PresetDocument`: the preset being edited, dirty tracking, problems, unknown keys
  checks    the pre-launch checks beyond the schema (context length, data, reward options)
            and the launch controls' checks (world size, GPU list)
  switching what switching the algorithm keeps; a default completion length fitted to the context
  device    the device a run will use, found without torch; the memory note for it
Views (Qt): panel (`SetupPanel`, the whole form; panel_problems: its problems, notes and
summary), section_form (a section's form: essentials, a folded group, Reset; the algorithm
chooser), folding (the folded groups and their remembered state), rewards_editor (the rewards section), editors
(single-field editors, a field's row), options_editor (a task's or reward's options),
reward_fields (a custom reward's file and function), unknown_keys (the unknown-key
banners), launch_options (Processes and GPUs: how Run launches, not saved in the preset),
background (the pre-launch checks off the main thread, garbage collection off).
Import the views from their modules (workbench.setup.<module>): the package names none, so
importing a model pulls in no Qt.
"""
