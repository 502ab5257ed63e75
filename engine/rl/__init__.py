"""The reinforcement-learning maths as pure functions on tensors, and the registries that
name its variants (torch-free: `registry`, `catalog`): policy surrogates, loss
aggregations, advantage estimators, reward scalings, KL estimators, importance-sampling
levels, DPO losses. See docs/architecture.md, "Where to add a policy loss, an estimator".
"""
