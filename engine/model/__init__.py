"""The model and what runs it: loading with LoRA (`loading`), chat templates (`chat`),
teacher-forced passes (`forward`, `token_logits`), sampling (`rollout`) and the memory a
preset needs (`memory_estimate`). `chat` and `memory_estimate` are torch-free, and so is
this package's import.
"""
