"""Tests for the shipped tiny model in assets/tiny-model (loading only, no training)."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from engine.builtin_model.recipe import build_tokenizer, builtin_model_path

MODEL_PATH = builtin_model_path()


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(MODEL_PATH)


@pytest.fixture(scope="module")
def model():
    model = transformers.AutoModelForCausalLM.from_pretrained(MODEL_PATH)
    model.eval()
    return model


def test_builtin_model_path_points_at_assets():
    assert MODEL_PATH.parts[-2:] == ("assets", "tiny-model")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"):
        assert (MODEL_PATH / name).is_file(), f"{name} missing from {MODEL_PATH}; rebuild with python -m engine.builtin_model"


def test_shipped_model_is_small():
    assert (MODEL_PATH / "model.safetensors").stat().st_size < 8 * 1024 * 1024


@pytest.mark.parametrize(
    "text",
    ["sort 3 1 4 1 5 = 1 1 3 4 5", "calc (2+3)*4 = 20", "  two  spaces, tabs\tand\nnewlines  ", ""],
)
def test_tokenizer_round_trip_is_exact(tokenizer, text):
    ids = tokenizer.encode(text)
    assert len(ids) == len(text)  # one token per character, nothing added
    assert tokenizer.decode(ids) == text


def test_tokenizer_special_tokens(tokenizer):
    assert (tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token) == ("<pad>", "<bos>", "<eos>")
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert tokenizer.padding_side == "left"
    assert tokenizer.decode([tokenizer.eos_token_id], skip_special_tokens=True) == ""


def test_shipped_tokenizer_matches_recipe(tokenizer):
    assert tokenizer.get_vocab() == build_tokenizer().get_vocab()


def test_model_config_matches_tokenizer(model, tokenizer):
    config = model.config
    assert config.model_type == "gpt2"
    assert config.vocab_size == len(tokenizer)
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (0, 1, 2)
    assert sum(p.numel() for p in model.parameters()) < 2_000_000


def test_greedy_sort_generation_produces_digits(model, tokenizer):
    inputs = tokenizer(["sort 3 1 2 =", "sort 9 0 7 7 ="], return_tensors="pt", padding=True)
    with torch.no_grad():
        output = model.generate(**inputs, do_sample=False, max_new_tokens=16)
    completions = tokenizer.batch_decode(output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    for completion in completions:
        digits = completion.split()
        assert digits, f"empty completion {completion!r}"
        assert all(d.isdigit() for d in digits), f"non-digit completion {completion!r}"


def test_recipe_file_records_accuracy():
    recipe = json.loads((MODEL_PATH / "recipe.json").read_text())
    greedy = recipe["held_out"]["greedy_accuracy"]
    assert set(greedy) == {"sort", "arithmetic"}
    # Partially competent on purpose: RL needs both signal and headroom.
    for task, accuracy in greedy.items():
        assert 0.1 <= accuracy <= 0.6, f"{task} greedy accuracy {accuracy} is outside the intended band"


# ---------------------------------------------------------------------------
# The recipe's default build stays what assets/tiny-model was built from
# ---------------------------------------------------------------------------


def test_default_recipe_config_is_the_one_the_shipped_model_records():
    from dataclasses import asdict

    from engine.builtin_model.recipe import RecipeConfig

    shipped = json.loads((MODEL_PATH / "recipe.json").read_text())["recipe"]
    # Same keys in the same order and the same values: recipe.json and the card of a
    # default rebuild are unchanged (the tools variant's knobs live in its own class).
    assert list(asdict(RecipeConfig()).items()) == list(shipped.items())


def test_command_line_defaults_build_the_default_config():
    from engine.builtin_model.__main__ import _parse_args
    from engine.builtin_model.recipe import RecipeConfig

    args = _parse_args([])
    assert (args.variant, args.out, args.steps, args.seed, args.sort_fraction) == ("tiny", None, None, None, None)
    assert RecipeConfig(seed=0, steps=2000, sort_fraction=0.08) == RecipeConfig()


def test_command_line_refuses_a_knob_of_the_other_variant(capsys):
    from engine.builtin_model.__main__ import _parse_args

    with pytest.raises(SystemExit):
        _parse_args(["--tool-fraction", "0.3"])
    assert "--tool-fraction does not apply to --variant tiny" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parse_args(["--variant", "tools", "--sort-fraction", "0.1"])


# ---------------------------------------------------------------------------
# builtin:tiny-tools (assets/tiny-tools-model)
# ---------------------------------------------------------------------------

TOOL_CALL = {"type": "function", "function": {"name": "calculate", "arguments": {"expression": "3+4"}}}
EPISODE = [
    {"role": "user", "content": "calc 3+4 ="},
    {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
    {"role": "tool", "name": "calculate", "content": "7"},
    {"role": "assistant", "content": " 7"},
]
EPISODE_TEXT = ('calc 3+4 =<tool_call>{"name": "calculate", "arguments": {"expression": "3+4"}}</tool_call><eos>'
                "<tool_response>7</tool_response> 7<eos>")


@pytest.fixture(scope="module")
def tools_tokenizer():
    from engine.builtin_model.tools import tools_model_path

    return transformers.AutoTokenizer.from_pretrained(tools_model_path())


def test_tools_model_folder_holds_a_model_with_its_template_in_tokenizer_config():
    from engine.builtin_model.tools import TOOLS_CHAT_TEMPLATE, tools_model_path

    folder = tools_model_path()
    assert folder.parts[-2:] == ("assets", "tiny-tools-model")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md", "recipe.json"):
        assert (folder / name).is_file(), f"{name} missing from {folder}"
    assert not (folder / "chat_template.jinja").exists()
    assert json.loads((folder / "tokenizer_config.json").read_text())["chat_template"] == TOOLS_CHAT_TEMPLATE
    assert json.loads((folder / "config.json").read_text())["n_positions"] == 256


def test_tools_template_renders_an_episode(tools_tokenizer):
    assert tools_tokenizer.apply_chat_template(EPISODE, tokenize=False) == EPISODE_TEXT


def test_tools_template_adds_nothing_for_the_generation_prompt(tools_tokenizer):
    user = EPISODE[:1]
    assert tools_tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True) == "calc 3+4 ="
    # After a tool reply the next model turn starts right after </tool_response>.
    assert tools_tokenizer.apply_chat_template(EPISODE[:3], tokenize=False, add_generation_prompt=True) == (
        EPISODE_TEXT.removesuffix(" 7<eos>"))
    with_system = [{"role": "system", "content": "Use the tool."}] + user
    assert tools_tokenizer.apply_chat_template(with_system, tokenize=False, add_generation_prompt=True) == (
        "Use the tool.\n\ncalc 3+4 =")


def test_tools_template_takes_calls_in_either_shape_and_several_of_them(tools_tokenizer):
    bare = {"name": "calculate", "arguments": '{"expression": "2*5"}'}  # no "function" level, arguments as JSON text
    messages = [{"role": "user", "content": "x"},
                {"role": "assistant", "content": "Let me see.", "tool_calls": [TOOL_CALL, bare]},
                {"role": "tool", "name": "calculate", "content": "7"}, {"role": "tool", "name": "calculate", "content": "10"}]
    assert tools_tokenizer.apply_chat_template(messages, tokenize=False) == (
        'xLet me see.<tool_call>{"name": "calculate", "arguments": {"expression": "3+4"}}</tool_call>'
        '<tool_call>{"name": "calculate", "arguments": {"expression": "2*5"}}</tool_call><eos>'
        "<tool_response>7</tool_response><tool_response>10</tool_response>")


def test_eos_written_by_the_template_is_one_eos_token(tools_tokenizer):
    ids = tools_tokenizer.apply_chat_template(EPISODE, tokenize=True, return_dict=False)
    assert tools_tokenizer.eos_token_id == 2
    assert ids.count(2) == 2  # the two model turns each end with <eos>
    assert len(ids) == len(EPISODE_TEXT) - 2 * (len("<eos>") - 1)  # every other character is one token
    assert ids[-1] == 2 and tools_tokenizer.encode("<eos>") == [2]


def test_the_template_preview_without_transformers_agrees(tools_tokenizer):
    from engine.builtin_model.tools import tools_model_path
    from engine.model.chat import FolderTemplater

    preview = FolderTemplater(tools_model_path())
    assert preview.apply_chat_template(EPISODE) == EPISODE_TEXT
    assert preview.apply_chat_template(EPISODE[:3], add_generation_prompt=True) == (
        tools_tokenizer.apply_chat_template(EPISODE[:3], tokenize=False, add_generation_prompt=True))


def test_sft_episodes_train_the_model_turns_only():
    from engine.builtin_model.tools import ToolsRecipeConfig, build_tools_tokenizer, encode_episode, episode_messages
    from engine.data import Example

    tokenizer = build_tools_tokenizer(ToolsRecipeConfig())
    example = Example("calc 3+4 =", {"answer": " 7"})
    assert episode_messages(example, True)[1:3] == EPISODE[1:3]
    ids, labels = encode_episode(episode_messages(example, True), tokenizer)
    assert tokenizer.decode(ids) == EPISODE_TEXT
    call = '<tool_call>{"name": "calculate", "arguments": {"expression": "3+4"}}</tool_call>'
    # By hand: 10 prompt characters, the call and its <eos>, 32 characters of tool
    # response, the answer " 7" and its <eos>.
    prompt, reply = 10, len("<tool_response>7</tool_response>")
    assert labels[:prompt] == [-100] * prompt
    assert labels[prompt : prompt + len(call) + 1] == ids[prompt : prompt + len(call) + 1]
    assert labels[prompt + len(call) + 1 : -3] == [-100] * reply
    assert labels[-3:] == ids[-3:] == tokenizer.encode(" 7") + [2]
    direct_ids, direct_labels = encode_episode(episode_messages(example, False), tokenizer)
    assert tokenizer.decode(direct_ids) == "calc 3+4 = 7<eos>"
    assert direct_labels == [-100] * 10 + tokenizer.encode(" 7") + [2]


def test_grouped_loss_is_the_loss_of_one_batch():
    from engine.builtin_model.recipe import _collate, build_model
    from engine.builtin_model.tools import ToolsRecipeConfig, build_tools_tokenizer, grouped_loss

    config = ToolsRecipeConfig(n_layer=1, n_embd=32, n_head=2)
    model = build_model(config, build_tools_tokenizer(config))
    short = [([5, 6, 2], [-100, 6, 2]), ([7, 8, 2], [-100, -100, 2])]
    long = [([5, 6, 7, 8, 9, 10, 2], [-100, -100, 7, 8, -100, 10, 2])]
    together = model(**_collate(short + long, 0)).loss
    assert torch.allclose(grouped_loss(model, [short, long], 0), together, atol=1e-6)


def test_tools_model_loads_through_the_engine_like_builtin_tiny():
    from engine.model.chat import chat_format
    from engine.model.loading import load_model, resolve_model_path
    from engine.model.config import ModelConfig

    assert resolve_model_path("builtin:tiny-tools").endswith("assets/tiny-tools-model")
    loaded = load_model(ModelConfig(name_or_path="builtin:tiny-tools", device="cpu"))
    assert loaded.context_length == 256 and loaded.eos_token_ids == [2]
    chat = chat_format("auto", loaded.tokenizer_chat_template, None)  # model.chat_template: auto
    assert chat.source == "tokenizer"
    assert chat.render(loaded.tokenizer, "calc (2+3)*4 =") == "calc (2+3)*4 ="


def test_an_unknown_builtin_name_lists_the_builtin_ones():
    from engine.model.loading import ModelLoadError, resolve_model_path

    with pytest.raises(ModelLoadError, match="builtin:tiny, builtin:tiny-tools"):
        resolve_model_path("builtin:huge")


def test_the_window_finds_the_tools_model_folder():
    from engine.builtin_model.tools import tools_model_path
    from workbench.setup.checks import model_folder

    assert model_folder("builtin:tiny-tools") == tools_model_path()
    assert model_folder("builtin:tiny") == MODEL_PATH


def test_tools_recipe_file_records_a_partially_competent_model():
    from engine.builtin_model.tools import tools_model_path

    held_out = json.loads((tools_model_path() / "recipe.json").read_text())["held_out"]
    # Room for RL: the tool is called in a minority of sampled first turns, direct answers
    # are often wrong, and a tool's result is copied right (so calling it pays).
    assert 0.15 <= held_out["sampled_tool_call_rate"] <= 0.35
    assert held_out["direct_greedy_accuracy"] < 0.6
    assert held_out["answer_after_tool_accuracy"] >= 0.8
    assert held_out["well_formed_call_rate"] >= 0.7


def test_tools_model_copies_a_tool_result_and_writes_a_call():
    from engine.builtin_model.tools import ToolsRecipeConfig, evaluate_tools_model, first_turns, parse_call, tools_model_path
    from engine.data import make_task

    model = transformers.AutoModelForCausalLM.from_pretrained(tools_model_path()).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tools_model_path())
    _, held_out = make_task("arithmetic", seed=0, num_train=20_000, num_eval=500)
    metrics = evaluate_tools_model(model, tokenizer, held_out[:40], seed=0)
    assert metrics["answer_after_tool_accuracy"] >= 0.8
    assert 0.0 < metrics["sampled_tool_call_rate"] < 0.6
    # Forced to start a call, the model writes one for the prompt's expression.
    prompt = "calc (2+3)*4 =<tool_call>"
    turn = first_turns(model, tokenizer, [prompt], sample=False)[0]
    assert parse_call("<tool_call>" + turn) == {"expression": "(2+3)*4"}
    assert ToolsRecipeConfig().n_positions == model.config.n_positions
