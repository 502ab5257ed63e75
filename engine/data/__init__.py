"""Where a run's prompts come from: built-in tasks, prompt files, their splits.

* ``examples.py``   -- :class:`Example` and the hash-based train/eval split of generated prompts
* ``tasks.py``      -- the built-in task generators, their registry and capacity checks
* ``preference.py`` -- DPO preference pairs for built-in tasks (each task's own corruption)
* ``unpaired.py``   -- KTO's unpaired rows (prompt, completion, label), checked or unpaired from pairs
* ``files.py``      -- prompt files: JSONL, CSV/TSV, parquet
* ``splits.py``     -- a preset's (train, eval) prompts, the accuracy reward, :class:`PromptStream`

Torch-free: the workbench and the preset's validators import it.
"""

from engine.data.examples import EVAL_BUCKETS, Example, is_eval_prompt
from engine.data.files import load_prompt_file
from engine.data.preference import corrupt_answer, preference_pairs
from engine.data.splits import PromptStream, accuracy_reward_name, load_splits
from engine.data.unpaired import load_unpaired_splits, unpair
from engine.data.tasks import (
    ACCURACY_REWARD,
    CORRUPTIONS,
    TASKS,
    check_task_options,
    check_task_size,
    make_arithmetic_examples,
    make_sort_examples,
    make_task,
    register_task,
    task_capacity,
    task_options,
)

__all__ = [
    "EVAL_BUCKETS", "Example", "is_eval_prompt", "load_prompt_file", "corrupt_answer", "preference_pairs",
    "PromptStream", "accuracy_reward_name", "load_splits", "ACCURACY_REWARD", "CORRUPTIONS", "TASKS",
    "check_task_options", "check_task_size", "make_arithmetic_examples", "make_sort_examples", "make_task",
    "register_task", "task_capacity", "task_options", "load_unpaired_splits", "unpair",
]
