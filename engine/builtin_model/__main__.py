"""`python -m engine.builtin_model`: rebuild assets/tiny-model (engine/builtin_model/recipe.py)."""

from engine.builtin_model.recipe import main

if __name__ == "__main__":
    main()
