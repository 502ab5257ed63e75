"""Local stand-ins for what the Hugging Face Hub would give: tiny chat models, data sets in
the real sets' formats, and a fake hub cache (``HF_HOME``) to load them from offline.

Everything is built on the spot (the tests never reach the Hub) and takes well under a
second or two. Imported by tests; it holds no tests itself (see test_hub_fixtures.py).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

FORMATS = ("save_to_disk", "parquet", "jsonl", "folder")

# Qwen2.5-Instruct's chat template, as shipped in its tokenizer_config.json: a default
# system prompt, tool descriptions folded into the system turn, tool calls and tool
# responses, and "<|im_start|>assistant\n" as the generation prompt.
QWEN25_CHAT_TEMPLATE = (
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"
)

# A Llama-3-Instruct-style template (without 3.1's tool and date preamble): the template,
# not the tokenizer, puts <|begin_of_text|> first, as Llama 3's does.
LLAMA3_CHAT_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

# Qwen2's pre-tokenizer split: single digits, words with one leading non-letter, punctuation runs.
QWEN_SPLIT_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
                    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


# ---------------------------------------------------------------- GSM8K-like rows
def _gsm8k_row(i: int, rng: random.Random) -> dict:
    """One GSM8K-shaped row: a word problem, then worked steps with <<a+b=c>> calculator
    annotations, then "#### <answer>" as the last line (what GSM8K reward parsers read)."""
    name = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Mark", "Ken"][i % 8]
    thing = ["apples", "clips", "books", "marbles", "pencils", "stickers"][i % 6]
    a, b, c = rng.randint(3, 40), rng.randint(2, 25), rng.randint(2, 6)
    kind = i % 3
    if kind == 0:
        q = f"{name} has {a} {thing}. She buys {b} more. How many {thing} does she have now?"
        steps, ans = [f"{name} has {a}+{b}=<<{a}+{b}={a + b}>>{a + b} {thing}."], a + b
    elif kind == 1:
        q = f"{name} buys {c} boxes with {b} {thing} in each box. How many {thing} are there in all?"
        steps, ans = [f"There are {c}*{b}=<<{c}*{b}={c * b}>>{c * b} {thing}."], c * b
    else:
        total = c * b + a
        q = (f"{name} had {total} {thing} and gave {a} away. The rest were shared equally "
             f"among {c} friends. How many {thing} did each friend get?")
        steps = [f"After giving some away, {total}-{a}=<<{total}-{a}={c * b}>>{c * b} were left.",
                 f"Each friend got {c * b}/{c}=<<{c * b}/{c}={b}>>{b} {thing}."]
        ans = b
    return {"question": q, "answer": "\n".join(steps) + f"\n#### {ans}"}


def _gsm8k_rows(n: int = 40, seed: int = 1234) -> list[dict]:
    rng = random.Random(seed)  # deterministic: tests may check exact answers
    return [_gsm8k_row(i, rng) for i in range(n)]


GSM8K_ROWS: list[dict] = _gsm8k_rows()


# ---------------------------------------------------------------- tiny models
def _corpus() -> list[str]:
    """Text the tiny BPE is trained on: GSM8K rows, R1-style tags, the chat markup's words."""
    lines = [r["question"] for r in GSM8K_ROWS] + [r["answer"] for r in GSM8K_ROWS]
    lines += [f"<think>\nI add {i} and {i + 3}.\n</think>\n<answer>{2 * i + 3}</answer>" for i in range(20)]
    lines += [f"The answer is \\boxed{{{i * 7}}}." for i in range(20)]
    lines += ["system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
              "user\nWhat is 2+3?", "assistant\n5", "0123456789 + - * / = ( ) . , ? ! # ####"]
    return lines


def _train_bpe(special_tokens: list[str], vocab_size: int = 512):
    """A byte-level BPE with Qwen2's normalizer, split regex and decoder, trained on _corpus().
    The special tokens are added after training so they sit at the end of the vocabulary,
    as in Qwen's and Llama 3's real vocabularies."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_special_tokens(special_tokens)
    return tok


def _save_causal_lm(folder: Path, config, tokenizer, eos_ids: list[int], pad_id: int,
                    bos_id: int | None, seed: int, tokenizer_class: str) -> Path:
    """Random weights for `config`, saved with the tokenizer and a GenerationConfig."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    # The real instruct models stop on either id; code must accept a list here.
    model.generation_config = GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_ids,
                                               pad_token_id=pad_id, do_sample=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    # Name the class the real repo names (transformers 5 would write "TokenizersBackend").
    tok_config = folder / "tokenizer_config.json"
    tok_config.write_text(json.dumps({**json.loads(tok_config.read_text()),
                                      "tokenizer_class": tokenizer_class}, indent=2))
    return folder


def make_tiny_chat_model(folder: Path, *, seed: int = 0, context: int = 512) -> Path:
    """A tiny Qwen2ForCausalLM shaped like Qwen/Qwen2.5-0.5B-Instruct: tied embeddings,
    grouped-query attention, ChatML specials, the real chat template, eos <|im_end|> for
    chat, generation stopping on [<|im_end|>, <|endoftext|>], pad <|endoftext|>, no bos.
    `context`: its positions (a prompt with tools' schemas needs ~600 of its small vocabulary's tokens)."""
    from transformers import PreTrainedTokenizerFast, Qwen2Config

    tok = _train_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"], model_max_length=context,
        clean_up_tokenization_spaces=False)
    tokenizer.chat_template = QWEN25_CHAT_TEMPLATE
    im_end, eot = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=context,
        tie_word_embeddings=True, bos_token_id=eot, eos_token_id=im_end, pad_token_id=eot)
    return _save_causal_lm(folder, config, tokenizer, [im_end, eot], eot, eot, seed,
                           "Qwen2Tokenizer")


def make_llama_chat_model(folder: Path, *, seed: int = 0, tokenizer_adds_bos: bool = False) -> Path:
    """A tiny LlamaForCausalLM shaped like meta-llama/Llama-3.2-1B-Instruct: the template
    writes <|begin_of_text|>, turns end with <|eot_id|>, generation stops on
    [<|eot_id|>, <|end_of_text|>]; Llama 3 has no pad token (<|end_of_text|> stands in, as
    trainers usually set). The real tokenizer also prepends bos on every encode, so
    tokenizing a rendered template doubles it: `tokenizer_adds_bos=True` imitates that."""
    from tokenizers import processors
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>"]
    tok = _train_bpe(specials)
    if tokenizer_adds_bos:
        bos_id = tok.token_to_id(specials[0])
        tok.post_processor = processors.TemplateProcessing(
            single=f"{specials[0]} $A", pair=f"{specials[0]} $A {specials[0]} $B",
            special_tokens=[(specials[0], bos_id)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>", pad_token="<|end_of_text|>", additional_special_tokens=specials[2:],
        model_max_length=512, clean_up_tokenization_spaces=False)
    tokenizer.chat_template = LLAMA3_CHAT_TEMPLATE
    bos, eot, eos = tokenizer.convert_tokens_to_ids(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=512,
        tie_word_embeddings=True, bos_token_id=bos, eos_token_id=eos, pad_token_id=eot)
    return _save_causal_lm(folder, config, tokenizer, [eos, eot], eot, bos, seed,
                           "PreTrainedTokenizerFast")


# ---------------------------------------------------------------- data sets
def _write(splits: dict[str, list[dict]], folder: Path, fmt: str, stem: str) -> Path:
    """Write the splits as `fmt`; the one-file formats (parquet, jsonl) hold every row."""
    from datasets import Dataset, DatasetDict

    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, not {fmt!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "save_to_disk":
        DatasetDict({k: Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(str(folder))
        return folder
    if fmt == "folder":
        # load_dataset(folder) names splits after the files: train.jsonl, test.jsonl.
        for name, rows in splits.items():
            Dataset.from_list(rows).to_json(str(folder / f"{name}.jsonl"))
        return folder
    every = Dataset.from_list([r for rows in splits.values() for r in rows])
    path = folder / f"{stem}.{'parquet' if fmt == 'parquet' else 'jsonl'}"
    every.to_parquet(str(path)) if fmt == "parquet" else every.to_json(str(path))
    return path


def make_gsm8k(folder: Path, fmt: str) -> Path:
    """openai/gsm8k ("main" config): question / answer columns, 32 train and 8 test rows."""
    return _write({"train": GSM8K_ROWS[:32], "test": GSM8K_ROWS[32:]}, folder, fmt, "gsm8k")


def _preference_rows(conversational: bool) -> list[dict]:
    """24 rows in TRL's preference format (as trl-lib/ultrafeedback_binarized): the chosen
    answer is the right number, the rejected one is off by one."""
    rows = []
    for r in GSM8K_ROWS[:24]:
        ans = int(r["answer"].rsplit("#### ", 1)[1])
        good, bad = f"The answer is {ans}.", f"The answer is {ans + 1}."
        if conversational:
            rows.append({"prompt": [{"role": "user", "content": r["question"]}],
                         "chosen": [{"role": "assistant", "content": good}],
                         "rejected": [{"role": "assistant", "content": bad}]})
        else:
            rows.append({"prompt": r["question"], "chosen": " " + good, "rejected": " " + bad})
    return rows


def make_preference_set(folder: Path, fmt: str, conversational: bool = True) -> Path:
    """TRL's (conversational or standard) preference set: prompt / chosen / rejected,
    20 train and 4 test rows."""
    rows = _preference_rows(conversational)
    return _write({"train": rows[:20], "test": rows[20:]}, folder, fmt, "preference")


def make_ultrafeedback_set(folder: Path, fmt: str, splits: tuple[str, str] = ("train_prefs", "test_prefs")) -> Path:
    """HuggingFaceH4/ultrafeedback_binarized's format: a text `prompt`, and `chosen` /
    `rejected` conversations (the user's turn, then the assistant's answer), with its other
    columns (prompt_id, messages, score_chosen, score_rejected). The chosen answer is the
    right number, the rejected one is off by one. 20 train and 4 test rows, under `splits`
    (the real set's train_prefs / test_prefs by default)."""
    rows = []
    for r in GSM8K_ROWS[:24]:
        ans = int(r["answer"].rsplit("#### ", 1)[1])
        user = {"role": "user", "content": r["question"]}
        chosen = [user, {"role": "assistant", "content": f"The answer is {ans}."}]
        rejected = [user, {"role": "assistant", "content": f"The answer is {ans + 1}."}]
        rows.append({"prompt": r["question"], "prompt_id": hashlib.sha256(r["question"].encode()).hexdigest(),
                     "chosen": chosen, "rejected": rejected, "messages": chosen,
                     "score_chosen": 8.0, "score_rejected": 3.0})
    return _write({splits[0]: rows[:20], splits[1]: rows[20:]}, folder, fmt, "ultrafeedback")


def _chat_row(i: int, r: dict) -> dict:
    """One trl-lib/Capybara-shaped row: `messages` alternating user and assistant, ending with
    the assistant's; every third a single exchange, the others two (the first answer
    worked, then a follow-up question), every fourth opening with a system message."""
    ans = r["answer"].rsplit("#### ", 1)[1]
    steps = r["answer"].rsplit("\n#### ", 1)[0]
    messages = [{"role": "system", "content": "You are a careful math tutor."}] if i % 4 == 0 else []
    messages.append({"role": "user", "content": r["question"]})
    if i % 3 == 0:
        messages.append({"role": "assistant", "content": f"{steps}\nThe answer is {ans}."})
    else:
        messages += [{"role": "assistant", "content": steps},
                     {"role": "user", "content": "So what is the final answer?"},
                     {"role": "assistant", "content": f"The answer is {ans}."}]
    return {"source": "GSM8K", "messages": messages,
            "num_turns": sum(m["role"] == "assistant" for m in messages)}


def make_chat_set(folder: Path, fmt: str) -> Path:
    """trl-lib/Capybara's format (TRL's conversational language-modeling type): a `messages`
    column of multi-turn chats whose last message is the assistant's, beside `source` and
    `num_turns`. 20 train and 4 test rows."""
    rows = [_chat_row(i, r) for i, r in enumerate(GSM8K_ROWS[:24])]
    return _write({"train": rows[:20], "test": rows[20:]}, folder, fmt, "chats")


def make_conversational_prompts(folder: Path, fmt: str) -> Path:
    """TRL's conversational prompt-only format with an extra answer column (as GRPO sets
    built from GSM8K carry): every other prompt opens with a system message. 20 train and
    4 test rows."""
    system = {"role": "system", "content": "Think in <think> tags, then answer in <answer> tags."}
    rows = []
    for i, r in enumerate(GSM8K_ROWS[:24]):
        user = {"role": "user", "content": r["question"]}
        rows.append({"prompt": [system, user] if i % 2 == 0 else [user],
                     "answer": r["answer"].rsplit("#### ", 1)[1]})
    return _write({"train": rows[:20], "test": rows[20:]}, folder, fmt, "prompts")


def make_gsm8k_parquet_pair(folder: Path) -> dict[str, Path]:
    """The files of the real openai/gsm8k repo's "main" config, keyed by their repo path."""
    from datasets import Dataset

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, rows in (("train", GSM8K_ROWS[:32]), ("test", GSM8K_ROWS[32:])):
        path = folder / f"{split}-00000-of-00001.parquet"
        Dataset.from_list(rows).to_parquet(str(path))
        files[f"main/{path.name}"] = path
    return files


# ---------------------------------------------------------------- fake hub cache
def _cache_repo(hf_home: Path, repo_type: str, repo_id: str, files: dict[str, Path]) -> Path:
    """Lay `files` ({path in repo: local file}) out as huggingface_hub's cache does:
    blobs/<hash>, snapshots/<commit>/<path> symlinked to the blob, refs/main = <commit>.
    The commit is a hash of the contents, so the same files give the same snapshot."""
    repo = Path(hf_home) / "hub" / f"{repo_type}s--{repo_id.replace('/', '--')}"
    contents = {name: Path(src).read_bytes() for name, src in sorted(files.items())}
    commit = hashlib.sha1(b"".join(n.encode() + hashlib.sha256(d).digest()
                                   for n, d in contents.items())).hexdigest()
    snapshot = repo / "snapshots" / commit
    for name, data in contents.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()  # the Hub names LFS blobs by sha256
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.exists() or link.is_symlink():
            link.unlink()
        try:  # relative links, as the real cache uses; copies where links are refused
            link.symlink_to(Path(*[".."] * (name.count("/") + 2), "blobs", blob.name))
        except OSError:
            shutil.copyfile(blob, link)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)  # no newline, as huggingface_hub writes it
    return snapshot


def cache_model(hf_home: Path, repo_id: str, model_folder: Path) -> Path:
    """Put a saved model folder into HF_HOME's hub cache as if `from_pretrained(repo_id)`
    had downloaded it. Returns the snapshot folder."""
    files = {p.relative_to(model_folder).as_posix(): p
             for p in sorted(Path(model_folder).rglob("*")) if p.is_file()}
    return _cache_repo(hf_home, "model", repo_id, files)


GSM8K_README = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
---
# GSM8K (tiny local stand-in)
"""


def cache_dataset(hf_home: Path, repo_id: str, files: dict[str, Path],
                  config_name: str = "main", *, arrow_cache: bool = True, readme: str | bool = True) -> Path:
    """Put data files into HF_HOME's hub cache as a dataset repo (openai/gsm8k's layout:
    main/train-00000-of-00001.parquet ...), with a README declaring the config, and also
    prepare `datasets`' own Arrow cache for that config.

    Why both: offline, `datasets.load_dataset(repo_id, ...)` never reads the hub cache.
    load.py raises on offline mode before any hub lookup and falls back to
    CachedDatasetModuleFactory, which only looks for a prepared Arrow cache at
    HF_HOME/datasets/<org>___<name>/<config>/<version>/<hash>/ (dataset_info.json and
    <name>-<split>.arrow files), exactly what an earlier online load leaves behind.

    `arrow_cache=False` lays out only what `hf download` does (blobs, symlinked snapshot,
    refs/main): the engine must then read the snapshot's files itself. `readme`: True for
    the README declaring `config_name` as above, False for none, or the README's text.
    Returns the hub snapshot folder (load it by path to read the hub files themselves)."""
    files = dict(files)
    if readme is not False:
        text = GSM8K_README.replace("main", config_name) if readme is True else readme
        readme_file = Path(hf_home) / "hub" / f".{repo_id.replace('/', '--')}-README.md"
        readme_file.parent.mkdir(parents=True, exist_ok=True)
        readme_file.write_text(text)
        files.setdefault("README.md", readme_file)
    snapshot = _cache_repo(hf_home, "dataset", repo_id, files)
    if readme is not False:
        readme_file.unlink()
    if arrow_cache:
        _prepare_arrow_cache(hf_home, repo_id, snapshot, config_name)
    return snapshot


def _prepare_arrow_cache(hf_home: Path, repo_id: str, snapshot: Path, config_name: str) -> None:
    """Build the Arrow cache an online `load_dataset(repo_id, config_name)` would leave."""
    from datasets.packaged_modules.parquet.parquet import Parquet

    splits = {}
    for path in sorted((snapshot / config_name).glob("*.parquet")):
        splits.setdefault(path.name.split("-")[0], []).append(str(path))
    if not splits:
        raise ValueError(f"no {config_name}/<split>-*.parquet files to build {repo_id}'s Arrow cache from")
    name = repo_id.split("/")[-1]
    out = (Path(hf_home) / "datasets" / repo_id.replace("/", "___") / config_name / "0.0.0"
           / snapshot.name)
    # No repo_id here: the builder would insist the data files be hf:// paths of the repo.
    builder = Parquet(cache_dir=str(Path(hf_home) / "datasets"), dataset_name=name,
                      config_name=config_name, data_files=splits, hash=snapshot.name)
    builder.download_and_prepare(output_dir=str(out))
    # The cache lookup takes a directory as config `main` only if its info says so.
    info_path = out / "dataset_info.json"
    info = json.loads(info_path.read_text())
    info.update(config_name=config_name, dataset_name=name)
    info_path.write_text(json.dumps(info))
    for lock in (Path(hf_home) / "datasets").rglob("*.lock"):  # left by the builder; not needed
        lock.unlink()
