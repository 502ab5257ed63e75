"""The engine's floor: what every other package may build on, and which imports none of
them. Torch-free, and this package imports nothing, so importing one part never loads
the others.

* ``section.py``  -- `Section`, `Float`, `SamplingFields`: what every preset section is built from
* ``limits.py``   -- guards on what a preset may hold and the upper bound of every number field
* ``errors.py``   -- `PresetError`, and pydantic's validation errors as readable lines
* ``registry.py`` -- `Registry`, the engine's one registry class: named functions with their
  declarations and options (`Entry.call`, the option checker), and `choice_of`
* ``paths.py``    -- the path rules: a preset's relative files, local path or hub id, broken links
* ``io.py``       -- a preset file's YAML in (under the guards) and out (atomic), `--set` overrides
* ``stopping.py`` -- `StopFlag` and the count of Ctrl-Cs: installed before anything heavy is imported
"""
