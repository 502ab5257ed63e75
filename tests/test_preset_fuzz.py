"""A preset fuzzer: hundreds of mutated presets, made from the bundled ones with a fixed
seed, go through the loader; a sample goes through `rl-engine validate` as a user runs it.

Every one must either load or be refused with a PresetError whose message names what
is wrong (the field path for a field's mutation, the file for a file that is not a
preset); no other exception, no traceback, nothing executed. The counts are printed
(`pytest -s tests/test_preset_fuzz.py`) and checked; docs/reliability.md cites them (the
README's *Reliability* sums them up).
"""

from __future__ import annotations

import datetime
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from engine.foundation.errors import PresetError
from engine.preset.schema import load_preset, preset_from_dict
from engine_runs import cli, rl_engine

SEED = 20261123
BUNDLED = sorted((ROOT / "presets").glob("*.yaml"))
MARKER = "fuzz-was-executed"  # a file an executed Python tag would create
FIELD_CASES = 1800  # field mutations checked, a seeded sample of all of them (make_cases)
DEEP_IN = "grpo-sort"  # the preset that also gets the 5,000- and 20,000-level nesting


@dataclass
class Case:
    name: str
    text: bytes  # the file's content
    path: str = ""  # the mutated field (dotted), "" for a mutation of the whole file
    overrides: tuple = ()  # applied as --set KEY=VALUE


# Junk of every type a YAML file can hold, and numbers at the edges.
JUNK = [
    None, True, False, 0, -1, 1, 3, 2**31, 10**20, -(10**20), 10**300, 1.5, -0.5, -0.0, 1e30, -1e30,
    1e300, 5e-324, float("inf"), float("-inf"), float("nan"), "", " ", "x", "inf", "-inf", "nan", ".nan",
    "1e999", "1e-3", "0x1F", "yes", "🙂", "a" * 5000, "\t\n", [], [1, "a"], [[[]]], {}, {"a": 1},
    {"name": "grpo"}, {1: 2}, {None: None}, datetime.date(2001, 2, 3), b"\x00\xff", {1, 2},
]
NON_FINITE = [float("inf"), float("-inf"), float("nan"), "inf", "-inf", "nan", "NaN", "+Inf"]
HUGE = [10**12, 10**20, -(10**12), 1e20, -1e20, 1e308, 2**64]


def paths(node, prefix=()):
    """Every path in a preset (sections, list items and leaves), depth first."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield prefix + (key,), value
        yield from paths(value, prefix + (key,))


def dotted(path) -> str:
    return ".".join(str(p) for p in path)


def replaced(data, path, value=None, delete=False, rename=None):
    import copy

    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    elif rename is not None:
        node[rename] = node.pop(path[-1])
    else:
        node[path[-1]] = value
    return data


def typo(key: str, rng: random.Random) -> str:
    """A plausible misspelling: a letter dropped, doubled, swapped or changed."""
    i = rng.randrange(len(key))
    kind = rng.choice(["drop", "double", "swap", "change"])
    if kind == "drop" and len(key) > 1:
        return key[:i] + key[i + 1:]
    if kind == "swap" and i + 1 < len(key) and key[i] != key[i + 1]:
        return key[:i] + key[i + 1] + key[i] + key[i + 2:]
    if kind == "change":
        return key[:i] + rng.choice("aeiouxz_") + key[i + 1:] if key[i] not in "aeiouxz_" else key[:i] + "q" + key[i + 1:]
    return key[:i] + key[i] + key[i:]


# libyaml's dumper where PyYAML has it: the cases are written ~4x faster (the loader under
# test is the engine's own, pure-Python one either way).
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump(data) -> bytes:
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False, allow_unicode=True).encode("utf-8")


def deep(depth: int, flow: str) -> str:
    return {"list": "[" * depth + "]" * depth, "map": "{a: " * depth + "1" + "}" * depth}[flow]


BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"] + [
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")])


def make_cases(tmp: Path) -> list[Case]:
    rng = random.Random(SEED)
    marker = tmp / MARKER
    cases: list[Case] = []
    for source in BUNDLED:
        text = source.read_bytes()
        data = yaml.safe_load(text)
        stem = source.stem
        all_paths = list(paths(data))
        for path, value in all_paths:
            where = dotted(path)
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            pool = JUNK + (NON_FINITE + HUGE if numeric else [])
            for junk in rng.sample(pool, 6 if numeric else 3):
                mutated = replaced(data, path, junk)
                if rng.random() < 0.25 and not isinstance(junk, (bytes, set, datetime.date, dict)):
                    # the same junk as a --set override, as the CLI passes it
                    flow = yaml.safe_dump(junk, default_flow_style=True, width=10**9).strip().removesuffix("...").strip()
                    cases.append(Case(f"{stem}:set {where}", text, where, (f"{where}={flow}",)))
                else:
                    cases.append(Case(f"{stem}:value {where}={junk!r:.30}", dump(mutated), where))
            if numeric:
                for bad in NON_FINITE:
                    cases.append(Case(f"{stem}:nonfinite {where}", dump(replaced(data, path, bad)), where))
                for big in (rng.choice(HUGE), -abs(rng.choice(HUGE)), -1):
                    cases.append(Case(f"{stem}:number {where}={big}", dump(replaced(data, path, big)), where))
            if isinstance(path[-1], str):
                cases.append(Case(f"{stem}:delete {where}", dump(replaced(data, path, delete=True)), where))
                wrong = typo(path[-1], rng)
                if wrong not in (path[-1], *(data if len(path) == 1 else [])):
                    renamed = dotted(path[:-1] + (wrong,))
                    cases.append(Case(f"{stem}:rename {where}->{wrong}",
                                      dump(replaced(data, path, rename=wrong)), renamed))
        # Whole-file mutations: the message must name the file.
        for i in range(4):
            at = rng.randrange(len(text))
            junk = bytes(rng.randrange(128, 256) for _ in range(rng.randint(1, 8)))
            cases.append(Case(f"{stem}:non-utf8 #{i}", text[:at] + junk + text[at:]))
        cases.append(Case(f"{stem}:binary", bytes(rng.randrange(256) for _ in range(2000))))
        cases.append(Case(f"{stem}:utf16", text.decode().encode("utf-16")))
        for i in range(3):
            cases.append(Case(f"{stem}:truncated #{i}", text[: rng.randrange(1, len(text))]))
        leaves = [p for p, v in all_paths if not isinstance(v, (dict, list))]
        # Nesting past the limit in every preset; the deep ones (about half a second each to
        # refuse, the YAML scanner's own cost) in one: where they sit does not matter to it.
        depths = ((33, "list"), (200, "map")) + (((5000, "list"), (5000, "map"), (20000, "list"))
                                                if stem == DEEP_IN else ())
        for depth, flow in depths:
            path = rng.choice(leaves)
            cases.append(Case(f"{stem}:deep {depth} {flow} at {dotted(path)}",
                              dump(replaced(data, path, "@@")).replace(b"'@@'", deep(depth, flow).encode())))
        cases.append(Case(f"{stem}:alias bomb", text + b"\n" + BOMB.encode() + b"\n"))
        cases.append(Case(f"{stem}:alias bomb in options",
                          dump(replaced(data, ("data", "task_options"), "@@")).replace(
                              b"'@@'", b"{x: *i}").replace(b"name:", (BOMB + "\nname:").encode(), 1)))
        cases.append(Case(f"{stem}:self alias", dump(replaced(data, ("data", "task_options"), "@@")).replace(
            b"'@@'", b"&loop {x: *loop}")))
        for tag in ("!!python/object/apply:os.system", "!!python/object/new:os.system",
                    "!!python/object/apply:subprocess.call"):
            command = f'["touch {marker}"]'
            line = f"{tag} {command}" if "subprocess" not in tag else f"{tag} [[touch, {marker}]]"
            cases.append(Case(f"{stem}:tag {tag}", text.replace(b"name: " + stem.encode(), f"name: {line}".encode(), 1)))
        cases.append(Case(f"{stem}:tag python/name", text + b"\nextra: !!python/name:os.system\n"))
        for top in ("- a\n- b\n", "just text\n", "42\n", "~\n", "[]\n", "!!binary aGk=\n", "2001-13-45\n"):
            cases.append(Case(f"{stem}:top {top.strip()}", top.encode()))
    # Every whole-file mutation, and a seeded sample of the field mutations: each bundled
    # preset's fields give some 700, and all 12 presets' 9,000 took 60-90 s of the suite's
    # 8-minute budget on one worker (16 presets: 11,475); a sample of FIELD_CASES still
    # mutates every kind of field (2,700 did until 2026-11-28: a third more time, no more kinds).
    fields = [c for c in cases if c.path]
    if len(fields) > FIELD_CASES:
        kept = {id(c) for c in rng.sample(fields, FIELD_CASES)}
        cases = [c for c in cases if not c.path or id(c) in kept]
    for i, case in enumerate(cases):  # unique names: results are keyed by them
        case.name = f"{i:04d} {case.name}"
    return cases


def names_field(path: str, message: str) -> bool:
    """The message names the field: its path, or (for a check of the section it sits in,
    e.g. `data: set exactly one of task or path`) the section's path and the key."""
    if path in message:
        return True
    parent, _, key = path.rpartition(".")
    return bool(parent) and f"{parent}:" in message and key in message


def check(case: Case, file: Path) -> str:
    """Load one case; return 'loaded' or 'refused', or fail with what went wrong."""
    file.write_bytes(case.text)
    try:
        load_preset(file, list(case.overrides))
    except PresetError as exc:
        message = str(exc)
        assert str(file) in message.splitlines()[0], (case.name, message)  # names the file
        assert all("\n" not in p and p for p in exc.problems), (case.name, exc.problems)
        assert "Traceback" not in message
        if case.path:
            assert names_field(case.path, message), (case.name, message)
        return "refused"
    except Exception as exc:  # noqa: BLE001 - any other exception is the failure
        pytest.fail(f"{case.name}: {type(exc).__name__}: {exc!s:.300}")
    return "loaded"


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    cases = make_cases(tmp)
    results = {case.name: check(case, tmp / "preset.yaml") for case in cases}
    assert not (tmp / MARKER).exists(), "a Python tag was executed"
    return tmp, cases, results


def test_every_mutated_preset_loads_or_is_refused_with_its_field(fuzz):
    tmp, cases, results = fuzz
    loaded = sum(r == "loaded" for r in results.values())
    print(f"\npreset fuzz: {len(cases)} mutated presets through load_preset: "
          f"{loaded} loaded, {len(cases) - loaded} refused with PresetError, 0 other exceptions")
    assert len(cases) >= 500 and len(results) == len(cases)  # names are unique: none hid another
    assert loaded and len(cases) - loaded > len(cases) / 2  # both outcomes are exercised


def test_structures_built_in_code_are_refused_by_path():
    """The window and --set build data in code: a deep or self-referencing value in the
    free-form `dict[str, Any]` fields must be a PresetError naming the field, never a
    RecursionError from validation."""
    nested: list = []
    deepest = nested
    for _ in range(5000):
        deepest.append([])
        deepest = deepest[0]
    loop: dict = {}
    loop["x"] = loop
    for section, value, where in [
        ({"data": {"task": "sort", "task_options": {"min_len": nested}}}, None, "data.task_options.min_len"),
        ({"rewards": [{"name": "my.py:f", "options": {"words": nested}}]}, None, "rewards.0.options.words"),
        ({"rewards": [{"name": "my.py:f", "options": loop}]}, None, "rewards.0.options.x"),
        ({"data": {"task": "sort", "task_options": {"min_len": [1] * 200_000}}}, None, "data.task_options.min_len"),
    ]:
        with pytest.raises(PresetError) as info:
            preset_from_dict(section)
        assert where in str(info.value), str(info.value)


def test_a_sample_through_the_cli(fuzz, engine_env):
    """20 of the cases as `rl-engine validate FILE [--set ...]`: exit 0 or 2, one error
    block, no traceback. Mostly refused ones: a valid preset makes validate load the
    model and build the prompts (seconds each on a busy machine). One (a Python tag) goes
    to the console script, a real process; the others to the same CLI in this process
    (engine_runs.cli)."""
    tmp, cases, results = fuzz
    rng = random.Random(SEED)
    special = [c for c in cases if " grpo-sort:" in c.name and any(
        word in c.name for word in ("tag !!python/object/apply:os", "non-utf8 #0", "deep 5000 list",
                                    "alias bomb in options", "utf16", "self alias"))]
    refused = [c for c in cases if results[c.name] == "refused" and c not in special]
    loaded = [c for c in cases if results[c.name] == "loaded"]
    sample = special + rng.sample(refused, 20 - len(special) - 2) + rng.sample(loaded, 2)
    tagged = next(c for c in special if "tag !!python/object/apply:os" in c.name)
    for i, case in enumerate(sample):
        file = tmp / f"cli-{i}.yaml"
        file.write_bytes(case.text)
        sets = [arg for item in case.overrides for arg in ("--set", item)]
        if case is tagged:  # the console script, a process of its own
            result = subprocess.run([*rl_engine(), "validate", str(file), *sets], capture_output=True, text=True,
                                    env=engine_env, cwd=tmp, timeout=300)
        else:
            result = cli("validate", file, *sets, cwd=tmp)
        out, err = result.stdout, result.stderr
        # A preset the loader takes may still be refused by validate, which checks more (the
        # prompts against the model's context, say: an empty file is the defaults, whose 256
        # completion tokens the built-in model's 128 positions cannot hold); one it refuses never passes.
        expected = (0, 2) if results[case.name] == "loaded" else (2,)
        assert result.returncode in expected, (case.name, err)
        assert "Traceback" not in err + out, (case.name, err)
        if result.returncode:
            assert err.startswith("error: ") and err.count("error:") == 1, (case.name, err)
    assert not (tmp / MARKER).exists(), "a Python tag was executed"
    print(f"\npreset fuzz: {len(sample)} of them through `rl-engine validate`: "
          f"{sum(results[c.name] == 'loaded' for c in sample)} valid, "
          f"{sum(results[c.name] == 'refused' for c in sample)} refused, 0 tracebacks")
