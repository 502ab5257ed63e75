"""Seeing the reward model (issue 39, engine side): a learned reward model's reward token by
token on an RL run's recorded rows (engine/algorithms/reward_tokens.py), and the Goodhart
plot a preset with a learned reward and a check declares (engine/algorithms/declaration.py).

One tiny reward-model checkpoint is trained once (a step, from the built-in model); GRPO and
PPO take a step against it in this process.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine.algorithms.declaration import Declares, learned_vs_truth
from engine.algorithms.reward_tokens import REWARD_TOKENS, policy_token_scores, reward_token_rows, score_changes
from engine.model.score import encode_texts, has_position_scores, position_scores, token_ends
from engine.run import rundir
from test_rlhf_pipeline import stage, train


@pytest.fixture(scope="module")
def rm_checkpoint(tmp_path_factory) -> str:
    """A reward-model run's checkpoint: one step from the built-in model (its score head
    barely trained: the scores differ from token to token, which is all these tests need)."""
    runs = tmp_path_factory.mktemp("reward_tokens") / "runs"
    data = stage("rm-tokens", {"name": "reward_model"})
    data["data"].update(num_train=8, num_eval=0)
    data["training"].update(max_steps=1, save_steps=1, batch_size=4)
    train(data, runs / "rm")
    return str(rundir.complete_checkpoints(runs / "rm")[-1])


def rl_preset(algorithm: dict, checkpoint: str) -> dict:
    """One step of `algorithm` against the reward model, exact match logged beside it (weight 0)."""
    data = stage("rl-tokens", {"num_generations": 4, **algorithm})
    data["rewards"] = [{"name": "reward_model", "options": {"model": checkpoint}},
                       {"name": "exact_match", "weight": 0.0}]
    data["data"].update(num_train=16, num_eval=4)
    data["training"].update(max_steps=1, save_steps=0, record_rollouts=4, log_completions=8)
    return data


# ------------------------------------------------------------------ the mapping, by hand


class TwoCharacterTokenizer:
    """A slow tokenizer whose tokens are 2 characters (the last may be 1): token id k+1 is
    the text's characters [2k, 2k+2)."""

    is_fast = False
    truncation_side = "right"

    def __init__(self):
        self.pieces: list[str] = []

    def __call__(self, texts, **_):
        rows = []
        for text in texts:
            row = []
            for start in range(0, len(text), 2):
                self.pieces.append(text[start:start + 2])
                row.append(len(self.pieces))
            rows.append(row)
        return {"input_ids": rows}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.pieces[i - 1] for i in ids)


def test_a_reward_models_tokens_of_two_characters_map_to_the_policys_by_hand():
    """The reward model reads "ab" + "cdefg" as "ab" "cd" "ef" "g" (scores 1..4); the policy
    wrote "c" "de" "f" "g" <eos>. Each policy token gets the last reward-model token ending
    at or before its end: "c" (ends at 3) the prompt's 1, "de" (5) "cd"'s 2, "f" (6) 3, "g" 4,
    and the end token the last value."""
    assert token_ends(TwoCharacterTokenizer(), ["abcdefg"], None) == [[2, 4, 6, 7]]
    pieces = {1: "c", 2: "de", 3: "f", 4: "g", 9: ""}  # 9: the end token, no text

    def decode(ids):
        return "".join(pieces[i] for i in ids)

    values, before = policy_token_scores([2, 4, 6, 7], [1.0, 2.0, 3.0, 4.0], 2, decode, [1, 2, 3, 4], 5, 5)
    assert values == [1.0, 2.0, 3.0, 4.0, 4.0] and before == 1.0
    assert score_changes(values, before) == [0.0, 1.0, 1.0, 1.0, 0.0]
    # a reward-model token straddling the prompt's end ("b" + "c" in one token) counts from the policy
    # token it ends in; before it, the prompt's last token ending inside the prompt
    values, before = policy_token_scores([1, 3, 5, 7], [0.5, 1.5, 2.5, 3.5], 2, decode, [1, 2, 3, 4], 5, 5)
    assert values == [1.5, 2.5, 2.5, 3.5, 3.5] and before == 0.5

    # the same through reward_token_rows: a component reading with the two-character tokenizer
    tokenizer = TwoCharacterTokenizer()

    def prefix_scores(prompts, completions):
        texts = [p + c for p, c in zip(prompts, completions)]
        return [(ends, [float(k + 1) for k in range(len(ends))]) for ends in token_ends(tokenizer, texts, None)]

    reward = SimpleNamespace(prefix_scores=prefix_scores)
    policy = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: decode(ids))
    rollout = SimpleNamespace(completion_ids=torch.tensor([[1, 2, 3, 4, 9], [2, 9, 0, 0, 0]]),
                              lengths=torch.tensor([5, 2]), episodes=None)
    outputs = SimpleNamespace(prompts=["ab", "ab"], completions=["cdefg", "de"], rollout=rollout, record_rows=[0])
    rows = reward_token_rows([("exact", 1.0, lambda p, c: [0.0] * len(p)), ("rm", 1.0, reward)], policy, [9], outputs)
    assert rows == {"rm_score": [[1.0, 2.0, 3.0, 4.0, 4.0], None], "rm_score_change": [[0.0, 1.0, 1.0, 1.0, 0.0], None],
                    "rm_label": ["rm", None]}
    # episodes are left out; a preset without a reward model gives nothing
    assert reward_token_rows([("rm", 1.0, reward)], policy, [9],
                             SimpleNamespace(**{**vars(outputs), "rollout": SimpleNamespace(episodes=[1])})) == {}
    assert reward_token_rows([("exact", 1.0, lambda p, c: [0.0])], policy, [9], outputs) == {}


def test_a_plain_transformers_classifier_gives_its_score_at_every_position():
    """position_scores on an AutoModelForSequenceClassification that is no peft model: its
    last position is the model's own logit; an encoder (read at [CLS]) has no such head."""
    from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2ForSequenceClassification

    torch.manual_seed(0)
    gpt2 = GPT2ForSequenceClassification(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=50, num_labels=1,
                                                    pad_token_id=0)).eval()
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        every = position_scores(gpt2, ids, mask)
        logits = gpt2(input_ids=ids, attention_mask=mask).logits[:, 0]
        alone = gpt2(input_ids=ids[:1, :2]).logits[0, 0]
    assert every[:, -1][0] == pytest.approx(float(logits[0]), abs=1e-5)
    assert float(every[1, 1]) == pytest.approx(float(logits[1]), abs=1e-5)
    assert float(every[0, 1]) == pytest.approx(float(alone), abs=1e-5)  # a prefix's reward
    bert = BertForSequenceClassification(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                    intermediate_size=32, vocab_size=50, num_labels=1))
    assert has_position_scores(gpt2) and not has_position_scores(bert)


# ------------------------------------------------------------------ a step against a reward model


@pytest.mark.parametrize("algorithm", [{"name": "grpo"}, {"name": "ppo"}], ids=["grpo", "ppo"])
def test_recorded_rows_carry_the_reward_models_score_at_every_token(rm_checkpoint, tmp_path, algorithm):
    trainer = train(rl_preset(algorithm, rm_checkpoint), tmp_path / "run")
    label, _, reward = trainer.reward_components[0]
    loaded, eos = reward.reward_model, set(trainer.policy.loaded.eos_token_ids)
    records = rundir.read_trajectories(tmp_path / "run", 1)
    assert len(records) == 4
    for record in records:
        scores, changes, ids = record["rm_score"], record["rm_score_change"], record["token_ids"]
        assert record["rm_label"] == label == "reward_model"
        assert len(scores) == len(changes) == len(ids)
        text = len(ids) - 1 if ids and ids[-1] in eos else len(ids)  # the completion's text tokens
        # the view is honest: at the last text token (and the end token) it is the row's reward
        assert scores[text - 1] == pytest.approx(record["rewards"][label], abs=1e-4)
        assert scores[-1] == pytest.approx(record["rewards"][label], abs=1e-4)
        # each change from the token before; the first from the prompt alone (its last token's score)
        prompt_alone = reward([record["prompt"]], [""])[0]
        assert changes[0] == pytest.approx(scores[0] - prompt_alone, abs=1e-4)
        assert changes[1:] == pytest.approx([b - a for a, b in zip(scores, scores[1:])], abs=1e-4)
        # one tokenizer for both: the direct reading, the score head at each completion token's position
        start = len(loaded.tokenizer(record["prompt"])["input_ids"])
        ids_rm, mask = encode_texts(loaded.tokenizer, [record["prompt"] + record["completion"]], None, loaded.device)
        with torch.no_grad():
            direct = position_scores(loaded.model, ids_rm, mask)[0, start:start + text].tolist()
        assert scores[:text] == pytest.approx(direct, rel=1e-5, abs=1e-6)
    events = rundir.read_events(tmp_path / "run")
    samples = [row for e in events if e["type"] == "samples" for row in e["samples"]]
    assert samples and not any(key.startswith("rm_") for row in samples for key in row)  # samples stay lean
    started = next(e for e in events if e["type"] == "run_started")
    assert started["records"]["token_values"][-4:] == [*REWARD_TOKENS, "logprob_after", "logprob_change"]
    goodhart = next(p for p in started["plots"] if p["key"] == "learned_vs_truth")
    last_eval = [e for e in events if e["type"] == "eval"][-1]
    assert set(goodhart["eval"]) <= set(last_eval)  # the eval events carry the plot's names


# ------------------------------------------------------------------ the declaration


class Declared(Declares):
    """A trainer's declaration without a trainer: the preset's rewards and training section."""

    RECORDS = {"layout": "group", "token_values": ["advantage"], "preferred": ["advantage"]}
    RECORDS_REWARD_TOKENS = True
    SAMPLES = True

    def __init__(self, *rewards: dict):
        entries = [SimpleNamespace(label=None, **r) for r in rewards]
        self.preset = SimpleNamespace(rewards=entries)
        self.cfg = SimpleNamespace(record_update_effect=False)


def test_the_token_view_and_the_goodhart_plot_are_declared_only_with_a_learned_reward():
    rm, exact = {"name": "reward_model"}, {"name": "exact_match"}
    declared = Declared(rm, exact).declaration()
    assert declared["records"]["token_values"] == ["advantage", "rm_score", "rm_score_change"]
    plot = next(p for p in declared["plots"] if p["key"] == "learned_vs_truth")
    names = ["rewards/reward_model/mean", "rewards/exact_match/mean"]
    assert plot["metrics"] == plot["eval"] == names
    assert "against the truth" in plot["title"] and "exploiting" in plot["help"]
    # no reward model: neither
    plain = Declared(exact, {"name": "sort_position"}).declaration()
    assert plain["records"]["token_values"] == ["advantage"]
    assert not any(p["key"] == "learned_vs_truth" for p in plain["plots"])
    # a reward model alone: the token view, no plot (nothing to read it against)
    alone = Declared(rm).declaration()
    assert "rm_score" in alone["records"]["token_values"] and not alone["plots"]
    # multi-turn episodes: their records go without the token view
    episodes = Declared(rm, exact)
    episodes.episodes = object()
    assert "rm_score" not in episodes.declaration()["records"]["token_values"]
    # a process reward model: a learned reward (the plot), not read token by token here
    process = Declared({"name": "process_reward_model"}, exact).declaration()
    assert process["records"]["token_values"] == ["advantage"]
    assert process["plots"][0]["metrics"] == ["rewards/process_reward_model/mean", "rewards/exact_match/mean"]
    # an algorithm that reads its batch (SFT, DPO, ...) is not trained on the rewards, and one that
    # records no reward tokens declares none
    offline = type("Offline", (Declared,), {"SAMPLES": False, "RECORDS_REWARD_TOKENS": False})(rm, exact)
    assert offline.declaration()["plots"] == [] and offline.declaration()["records"]["token_values"] == ["advantage"]
    # labels name the components
    labelled = learned_vs_truth([SimpleNamespace(name="reward_model", label="rm"),
                                 SimpleNamespace(name="exact_match", label=None),
                                 SimpleNamespace(name="sort_position", label=None)])
    assert labelled["metrics"] == ["rewards/rm/mean", "rewards/exact_match/mean", "rewards/sort_position/mean"]
