"""The reinforcement-learning maths as pure functions on tensors: losses, KL estimators,
advantage estimators (`losses`, `advantages`).
"""
