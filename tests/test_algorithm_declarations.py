"""No module outside engine/algorithms/ decides by an algorithm's name (issue 22): what
differs between algorithms (the update pass the memory estimate counts, what a step's
processes share, batch rules, preference pairs, the playground's advantages) is declared
by each algorithm's config class (engine/algorithms/config_base.py), and a new algorithm
gets its own rules instead of GRPO's.

The source check reads the code (ast, nothing runs). A comparison of an algorithm name is
a registered name as a string constant compared (==, !=, in, not in, match/case) with an
expression that reads a name (`x.name`, `x["name"]`, `x.get("name")`, a variable called
name or algorithm...), or a dict literal keyed by two or more algorithm names (a
per-algorithm table). An advantage estimator or a loss type that happens to be called
"grpo" is compared with its own field (`advantage_estimator`, `loss_type`) and is not one.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import ClassVar, Literal

import pytest
from pydantic import Field

from engine.algorithms import ALGORITHMS, register_algorithm, undeclared
from engine.foundation.registry import Registry
from engine.algorithms.config_base import AlgorithmSection, UpdateBatch
from engine.distributed.launch import world_size_problems
from engine.model.memory_estimate import estimate_memory, update_rows
from engine.rewards.input_checks import reward_field_problems
from engine.preset.schema import ALGORITHM_CONFIGS, ALGORITHM_NAMES, preset_from_dict

ROOT = Path(__file__).resolve().parents[1]
NAMES = frozenset(ALGORITHMS)
# The one module outside the engine's algorithms allowed to name them: it describes the
# runs of engines that wrote no declaration, so those names are fixed (docs/architecture.md).
DESCRIBES_OLD_RUNS = {Path("workbench/run_declaration.py")}
_NAME_WORDS = ("name", "algorithm", "algo")


# ------------------------------------------------------------------ the source check


def _named_constants(node: ast.AST) -> set[str]:
    """The algorithm names a constant, or a tuple, list or set literal of constants, holds."""
    if isinstance(node, ast.Constant) and node.value in NAMES:
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in NAMES}
    return set()


def _reads_a_name(node: ast.AST) -> bool:
    """Whether an expression reads an algorithm's name: `x.name`, `x.algorithm`,
    `x["name"]`, `x.get("name", ...)`, a variable called `name`, `algo_name`, ..."""
    if isinstance(node, ast.Attribute):
        return node.attr in _NAME_WORDS or node.attr.endswith("_name")
    if isinstance(node, ast.Name):
        return node.id in _NAME_WORDS or node.id.endswith("_name") or node.id.startswith("algo")
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value in _NAME_WORDS
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value in _NAME_WORDS
    return False


def name_branches(source: str) -> list[str]:
    """'line N: what' for each place `source` decides by an algorithm's name, e.g.
    "line 3: algo.name == 'dpo'"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            operands = [node.left, *node.comparators]
            if any(_named_constants(o) for o in operands) and any(_reads_a_name(o) for o in operands):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Dict):
            keys = set().union(*(_named_constants(k) for k in node.keys if k is not None))
            if len(keys) >= 2:
                found.append(f"line {node.lineno}: a table keyed by {', '.join(sorted(keys))}")
        elif isinstance(node, ast.Match) and _reads_a_name(node.subject):
            for case in node.cases:
                if isinstance(case.pattern, ast.MatchValue) and _named_constants(case.pattern.value):
                    found.append(f"line {case.pattern.lineno}: case {ast.unparse(case.pattern)}")
    return found


def modules_outside_the_algorithms() -> list[Path]:
    paths = sorted((ROOT / "engine").rglob("*.py")) + sorted((ROOT / "workbench").rglob("*.py"))
    return [p.relative_to(ROOT) for p in paths
            if p.relative_to(ROOT).parts[:2] != ("engine", "algorithms") and p.relative_to(ROOT) not in DESCRIBES_OLD_RUNS]


def test_no_module_outside_the_algorithms_branches_on_an_algorithm_name():
    found = [f"{path}: {where}" for path in modules_outside_the_algorithms()
             for where in name_branches((ROOT / path).read_text(encoding="utf-8"))]
    assert not found, ("decided by an algorithm's name; declare it on the algorithm's config class "
                       "(engine/algorithms/config_base.py) instead:\n" + "\n".join(found))


@pytest.mark.parametrize("source", [
    'if algo.name == "dpo":\n    pass',  # memory_estimate and launch before issue 22
    'x = 1 if algo.name == "ppo" else 0',
    'if algo.name != "grpo":\n    pass',  # the playground's
    'pairs = preset.algorithm.name == "dpo" and preset.data.task is None',  # validate's
    'if name in ("ppo", "dpo"):\n    pass',
    'if section.get("name") == "ppo":\n    pass',
    'if record["algorithm"] not in {"dpo"}:\n    pass',
    'ROWS = {"grpo": 1, "dpo": 2}[algo.name]',
    'match preset.algorithm.name:\n    case "ppo":\n        pass',
])
def test_the_check_finds_a_branch_on_a_name(source):
    assert name_branches(source), source


@pytest.mark.parametrize("source", [
    'if algo.advantage_estimator == "grpo" and algo.scale_rewards == "batch":\n    pass',  # an estimator
    'ESTIMATORS = {"grpo": f, "rloo": g}',  # a table of estimators, one of them called grpo
    'PER_COMPLETION = ("grpo", "rloo")\nok = algo.advantage_estimator in PER_COMPLETION',
    'algorithm = section or {"name": "grpo"}',  # a default, not a decision
    'if algo.trains_on_pairs:\n    pass',
])
def test_the_check_leaves_other_names_alone(source):
    assert name_branches(source) == []


# ------------------------------------------------------------------ the one registry


def test_the_schema_reads_its_algorithms_off_the_one_registry():
    assert ALGORITHM_NAMES == ("grpo", "ppo", "dpo", "online_dpo", "kto", "sft", "reward_model")
    assert ALGORITHM_CONFIGS == {entry.name: entry.declares for entry in ALGORITHMS.entries()}
    assert all(undeclared(entry.declares) == "" for entry in ALGORITHMS.entries())


def test_a_config_that_leaves_a_declaration_out_is_refused():
    class Undeclared(AlgorithmSection):
        name: Literal["half"] = Field("half")

        def step_shares(self, training):
            return training.batch_size, "rows"

    with pytest.raises(TypeError, match="Undeclared does not declare update_batch"):
        register_algorithm(Undeclared, "tests.nowhere:Trainer", registry=Registry("algorithm"))
    with pytest.raises(TypeError, match="not an AlgorithmSection"):
        register_algorithm(dict, "tests.nowhere:Trainer", registry=Registry("algorithm"))


# --------------------------------------------------- a new algorithm, its own rules


class TriplesConfig(AlgorithmSection):
    """An algorithm registered from this test: each unit of a step is one prompt with three
    sequences (say, a best, a middle and a worst answer), a value head beside the adapter,
    and a rule of its own for several processes."""

    name: Literal["triples"] = Field("triples")
    max_completion_length: int = Field(16, ge=1)
    trains_value_head: ClassVar[bool] = True
    trains_on_pairs: ClassVar[bool] = True

    def update_batch(self, training) -> UpdateBatch:
        return UpdateBatch(units=training.batch_size, rows=3, micro_rows=3)

    def step_shares(self, training) -> tuple[int, str]:
        return training.batch_size, "triples (training.batch_size)"

    def world_size_problems(self, training, size: int) -> list[str]:
        return [f"--nproc-per-node {size}: triples train in one process"]

    def playground_reason(self) -> str:
        return "triples are ranked, not scored"


TINY_LLAMA = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
              "num_key_value_heads": 1, "intermediate_size": 16, "vocab_size": 10}


def with_algorithm(config, batch_size: int = 6, **training):
    """A GRPO preset with `config` as its algorithm (the schema's union is built at import,
    so a class registered from a test stands in without being validated again)."""
    grpo = preset_from_dict({"model": {"name_or_path": "some/model"},
                             "algorithm": {"name": "grpo", "num_generations": 2, "max_completion_length": 16},
                             "training": {"batch_size": batch_size, **training}})
    return grpo, grpo.model_copy(update={"algorithm": config})


def test_a_new_algorithm_gets_its_own_update_pass_in_the_memory_estimate():
    assert register_algorithm(TriplesConfig, "tests.nowhere:TriplesTrainer", registry=Registry("algorithm")).name == "triples"
    grpo, triples = with_algorithm(TriplesConfig())
    assert update_rows(grpo) == (6, 3)  # 3 groups of 2
    assert update_rows(triples) == (18, 6)  # 6 triples of 3 rows, each after one prompt
    assert update_rows(triples, processes=4) == (6, 2)  # ceil(6 / 4) = 2 triples
    _, micro = with_algorithm(TriplesConfig(), micro_batch_size=2)
    assert update_rows(micro) == (6, 2)  # micro_batch_size counts triples: 2 x 3 rows
    ours = estimate_memory(triples, TINY_LLAMA, prompt_tokens=8, device="cpu")
    theirs = estimate_memory(grpo, TINY_LLAMA, prompt_tokens=8, device="cpu")
    assert ours.value_head == (8 + 1) * 16 and theirs.value_head == 0
    assert ours.activations > theirs.activations  # 18 rows against 6


def test_a_new_algorithm_gets_its_own_world_size_rules():
    grpo, triples = with_algorithm(TriplesConfig(), batch_size=4)
    problems = world_size_problems(triples, 8)
    assert problems[0].startswith("--nproc-per-node 8: a step has 4 triples (training.batch_size), so at most 4")
    assert "--nproc-per-node 8: triples train in one process" in problems
    assert not any("num_generations" in p for p in problems)  # not GRPO's message
    assert any("algorithm.num_generations 2" in p for p in world_size_problems(grpo, 8))


def test_pairs_are_declared_not_named():
    # The rewards' data columns are checked for algorithms that score completions only.
    from engine.data import Example

    grpo, triples = with_algorithm(TriplesConfig())
    rows = [Example("sort 2 1 =", {"id": 1})]
    assert reward_field_problems(grpo, rows)  # exact_match reads `answer`, which the rows lack
    assert reward_field_problems(triples, rows) == []


def test_the_playground_asks_the_algorithm_why_it_shows_no_advantages():
    from engine.commands.score_rewards import group_advantages_of

    _, triples = with_algorithm(TriplesConfig())
    advantages, about = group_advantages_of(triples, [1.0, 0.0], [0, 0], 2)
    assert advantages == [None, None] and about["reason"] == "triples are ranked, not scored"
