"""The Hugging Face hub as the engine meets it: whether it answers and offline mode
(`access`), and what the local cache holds (`cache`). Torch-free.
"""
