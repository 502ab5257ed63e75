from engine.rewards.builtin import sort_steps

_steps = sort_steps()


def sort_steps_mean(prompts, completions, **fields):
    """sort_steps as an outcome reward: the mean of its step scores (0 for no steps)."""
    return [sum(s for _, s in steps) / len(steps) if steps else 0.0
            for steps in _steps(prompts, completions, **fields)]
