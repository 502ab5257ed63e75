"""`python -m engine.builtin_model`: rebuild a built-in model, assets/tiny-model
(engine/builtin_model/recipe.py) or, with --variant tools, assets/tiny-tools-model
(engine/builtin_model/tools.py). The command line lives here, above both recipes."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from engine.builtin_model.card import save_builtin_model
from engine.builtin_model.recipe import (TASK_NAMES, RecipeConfig, builtin_model_path, evaluate_builtin_model,
                                         train_builtin_model)
from engine.builtin_model.tools import ToolsRecipeConfig, build_tools_model, tools_model_path


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; a knob left out takes the variant's default (None here)."""
    parser = argparse.ArgumentParser(description="Rebuild a built-in model: builtin:tiny, or builtin:tiny-tools "
                                     "with --variant tools (arithmetic episodes with the calculator tool).")
    parser.add_argument("--variant", choices=("tiny", "tools"), default="tiny")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: the variant's folder)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="SFT steps (sets competence)")
    parser.add_argument("--sort-fraction", type=float, default=None, help="tiny: share of sort examples per batch")
    parser.add_argument("--tool-fraction", type=float, default=None, help="tools: share of tool episodes per batch")
    args = parser.parse_args(argv)
    wrong = "--tool-fraction" if args.variant == "tiny" else "--sort-fraction"
    if getattr(args, wrong[2:].replace("-", "_")) is not None:
        parser.error(f"{wrong} does not apply to --variant {args.variant}")
    return args


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m engine.builtin_model --out assets/tiny-model``
    (``--variant tools --out assets/tiny-tools-model`` for builtin:tiny-tools)."""
    args = _parse_args(argv)
    chosen = {key: getattr(args, key) for key in ("seed", "steps", "sort_fraction") if getattr(args, key) is not None}
    if args.variant == "tools":
        if args.tool_fraction is not None:
            chosen["tool_fraction"] = args.tool_fraction
        build_tools_model(ToolsRecipeConfig(**chosen), args.out or tools_model_path())
        return
    config = RecipeConfig(**chosen)
    out = args.out or builtin_model_path()
    started = time.perf_counter()
    model, tokenizer = train_builtin_model(config)
    trained_in = time.perf_counter() - started
    print("evaluating on the held-out eval split...", flush=True)
    metrics = evaluate_builtin_model(model, tokenizer, config)
    save_builtin_model(out, model, tokenizer, config, metrics)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"saved {parameters:,}-parameter model to {out} (trained in {trained_in:.0f}s)")
    for name in TASK_NAMES:
        print(
            f"held-out greedy accuracy {name}: {metrics['greedy_accuracy'][name]:.1%} "
            f"(sampled pass@8 {metrics['sampled_pass_at_8'][name]:.1%})"
        )


if __name__ == "__main__":
    main()
