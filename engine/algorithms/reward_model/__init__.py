"""Reward-model training on preference pairs, Bradley-Terry (algorithm.name: reward_model)."""
