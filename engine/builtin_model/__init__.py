"""The small built-in model (`builtin:tiny`, assets/tiny-model): its recipe (`recipe`) and
the saved folder with its model card (`card`). `python -m engine.builtin_model` rebuilds it.
"""
