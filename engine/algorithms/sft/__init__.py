"""Supervised fine-tuning on demonstrations (algorithm.name: sft)."""
