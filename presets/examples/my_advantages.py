"""An advantage estimator of your own, named in a preset as
`algorithm.advantage_estimator: my_advantages.py:median_baseline`
(docs/research-in-a-file.md has the contract).

The engine calls it with rewards (B,) (a prompt's num_generations completions side by
side) and mask (B, T) positionally and, by keyword, the options it names out of:
num_generations, scale_rewards. It returns one advantage per completion (B,) or one per
token (B, T); the inspector shows them per token like the built-in estimators'.
"""


def median_baseline(rewards, mask, *, num_generations):
    """Each reward minus its group's median (the lower middle value for an even group):
    one outlier in a group moves nobody else's advantage."""
    grouped = rewards.view(-1, num_generations)                         # (P, G)
    return (grouped - grouped.median(dim=1, keepdim=True).values).reshape(-1)  # (B,)
