"""The build manifest `model.manifest.json` (docs/abi.md) and the Make depfile (`-MD`, `-MF`, `-MT`,
`-MP`), as written by `catenc compile` run as a subprocess."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import catenc

MODEL = """\
include = ["lib/inc.toml"]

[composite.mlp]
doc = "Two layers; the hidden width is derived."
inputs = ["x: f32[B, D]", "w1: f32[D, H]", "w2: f32[H, D]"]
outputs = ["y: f32[B, D]"]
where = ["H = 4*D", "D % 4 == 0"]
body = \"\"\"
h = relu(x @ w1)
y = twice(shift(h @ w2))
\"\"\"

[composite.gemm]
doc = "Matrix product."
inputs = ["A: f32[M, K]", "B: f32[K, N]"]
outputs = ["C: f32[M, N]"]
body = "C[i, j] = sum[k](A[i, k] * B[k, j])"
"""

INCLUDED = """\
[composite.shift]
inputs = ["a: f32[P, Q]"]
outputs = ["b: f32[P, Q]"]
body = "b = a + 1"
"""

SEARCHED = """\
[composite.twice]
inputs = ["a: f32[P, Q]"]
outputs = ["b: f32[P, Q]"]
body = "b = a * 2"
"""

MAIN = "src/model.toml"
USER_INPUTS = {"src/model.toml", "src/lib/inc.toml", "libdir/ops.toml"}
RUNTIME_INPUT = "catenc:runtimes/clang.py"
ARGS = ("-I", "libdir", "-D", "N=64", "--config", "OMP=1")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def catenc_run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "catenc", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result


def make_tree(root: Path) -> Path:
    (root / "src" / "lib").mkdir(parents=True)
    (root / "libdir").mkdir()
    (root / MAIN).write_text(MODEL)
    (root / "src" / "lib" / "inc.toml").write_text(INCLUDED)
    (root / "libdir" / "ops.toml").write_text(SEARCHED)
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = make_tree(tmp_path_factory.mktemp("manifest"))
    catenc_run(root, "compile", MAIN, "-o", "out", *ARGS, "-MD")
    return root


@pytest.fixture(scope="module")
def manifest(built: Path) -> dict:
    return json.loads((built / "out" / "model.manifest.json").read_text())


@pytest.fixture(scope="module")
def entries(manifest: dict) -> dict[str, dict]:
    return {e["name"]: e for e in manifest["entries"]}


def package_file(display: str) -> Path:
    """The installed file a `catenc:<path>` input names."""
    assert display.startswith("catenc:"), display
    relative = display[len("catenc:") :]
    package = Path(catenc.__file__).resolve().parent
    for candidate in (package / relative, package.parent / relative):
        if candidate.is_file():
            return candidate
    raise AssertionError(f"{display} names no file of the installed catenc")


def evaluate(value, env: dict[str, int]) -> int:
    """A manifest shape/size: an int or a Python integer expression over symbols."""
    if isinstance(value, bool):
        raise AssertionError(f"{value!r} is not an integer expression")
    if isinstance(value, int):
        return value
    assert isinstance(value, str), value
    # Python syntax: max() and min() are the only functions (a workspace region shared by values
    # of incomparable sizes, panels sized min(K, kc))
    return int(eval(value, {"__builtins__": {}, "max": max, "min": min}, dict(env)))


# --------------------------------------------------------------------------- #
# top level
# --------------------------------------------------------------------------- #


def test_schema_and_version(manifest: dict) -> None:
    assert manifest["schema"] == "catenc.manifest/1"
    assert manifest["catenc_version"] == catenc.__version__


def test_keys_are_sorted_everywhere(built: Path) -> None:
    text = (built / "out" / "model.manifest.json").read_text()
    unsorted = []

    def hook(pairs):
        keys = [k for k, _ in pairs]
        if keys != sorted(keys):
            unsorted.append(keys)
        return dict(pairs)

    json.loads(text, object_pairs_hook=hook)
    assert not unsorted, unsorted


def test_no_timestamps(built: Path, manifest: dict) -> None:
    text = (built / "out" / "model.manifest.json").read_text()
    assert not re.search(r"\b(19|20)\d\d-[01]\d-[0-3]\d", text), "a date"
    assert not re.search(r"\b[0-2]\d:[0-5]\d:[0-5]\d\b", text), "a time of day"

    def keys(value):
        if isinstance(value, dict):
            for key, item in value.items():
                yield key
                yield from keys(item)
        elif isinstance(value, list):
            for item in value:
                yield from keys(item)

    stamped = [
        k for k in keys(manifest) if re.search(r"(^|_)(time|date|datetime|timestamp|mtime|epoch|created)(_|$)", k, re.I)
    ]
    assert not stamped, stamped


def test_runtime(manifest: dict) -> None:
    runtime = manifest["runtime"]
    assert runtime["name"] == "clang"
    assert runtime["language"] == "c"
    assert isinstance(runtime["config"], dict)
    assert runtime["config"]["OMP"] == "1"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in runtime["config"].items())


def test_inputs(built: Path, manifest: dict) -> None:
    paths = [i["path"] for i in manifest["inputs"]]
    assert len(paths) == len(set(paths)), paths
    assert set(paths) >= USER_INPUTS, paths
    assert RUNTIME_INPUT in paths, paths
    assert paths[0] == MAIN, "the file named on the command line comes first"
    for item in manifest["inputs"]:
        path = item["path"]
        on_disk = package_file(path) if path.startswith("catenc:") else built / path
        assert on_disk.is_file(), path
        assert item["sha256"] == sha256(on_disk), path
        assert not Path(path).is_absolute(), path


def test_files(built: Path, manifest: dict) -> None:
    out = built / "out"
    roles = {f["path"]: f["role"] for f in manifest["files"]}
    assert roles["model.c"] == "source"
    assert roles["model.h"] == "header"
    assert roles["libmodel.so"] == "shared_library"
    for item in manifest["files"]:
        assert (out / item["path"]).is_file(), item["path"]
        assert item["sha256"] == sha256(out / item["path"]), item["path"]


def test_build_commands(built: Path, manifest: dict) -> None:
    commands = manifest["build"]["commands"]
    assert commands and all(isinstance(c, list) and c and all(isinstance(a, str) for a in c) for c in commands)
    flat = [arg for command in commands for arg in command]
    assert any("libmodel.so" in arg for arg in flat), commands
    assert any("model.c" in arg for arg in flat), commands
    assert not any(str(built) in arg for arg in flat), commands


# --------------------------------------------------------------------------- #
# entries
# --------------------------------------------------------------------------- #

ENTRY_KEYS = {
    "name", "symbol", "workspace_symbol", "prototype", "args", "constraints", "derived",
    "specialized", "workspace_bytes", "kernels",
}  # fmt: skip


def test_entries_are_the_composites_of_the_file(entries: dict) -> None:
    assert set(entries) == {"mlp", "gemm"}  # not `shift` (included) nor `twice` (-I)
    for name, entry in entries.items():
        assert set(entry) >= ENTRY_KEYS, ENTRY_KEYS - set(entry)
        assert entry["symbol"] == name
        assert entry["workspace_symbol"] == f"{name}_workspace_bytes"


def test_prototype_is_the_header_declaration(built: Path, entries: dict) -> None:
    header = " ".join((built / "out" / "model.h").read_text().split())
    for entry in entries.values():
        prototype = " ".join(entry["prototype"].split())
        assert prototype.startswith(f"int {entry['symbol']}("), prototype
        assert prototype + ";" in header, prototype


def roles(entry: dict) -> list[tuple[str, str]]:
    return [(a["role"], a["name"]) for a in entry["args"]]


def test_args(entries: dict) -> None:
    tail = [("workspace", "workspace"), ("workspace_bytes", "workspace_bytes")]
    assert roles(entries["mlp"]) == [
        ("input", "x"), ("input", "w1"), ("input", "w2"), ("output", "y"),
        ("dim", "B"), ("dim", "D"), *tail,
    ]  # fmt: skip
    assert roles(entries["gemm"]) == [
        ("input", "A"), ("input", "B"), ("output", "C"), ("dim", "M"), ("dim", "K"), *tail,
    ]  # fmt: skip
    for entry in entries.values():
        for arg in entry["args"]:
            if arg["role"] in ("input", "output"):
                assert arg["dtype"] == "f32"
                assert isinstance(arg["shape"], list)
            if arg["role"] == "dim":
                assert arg.get("ctype") == "int64_t"


def shapes(entry: dict, env: dict[str, int]) -> dict[str, list[int]]:
    return {
        a["name"]: [evaluate(d, env) for d in a["shape"]] for a in entry["args"] if a["role"] in ("input", "output")
    }


def test_shapes_are_integer_expressions(entries: dict) -> None:
    for b, d in ((2, 4), (3, 8)):
        env = {"B": b, "D": d, "H": 4 * d}
        assert shapes(entries["mlp"], env) == {
            "x": [b, d], "w1": [d, 4 * d], "w2": [4 * d, d], "y": [b, d]
        }  # fmt: skip
    # N is fixed by -D: the shapes no longer mention it
    assert shapes(entries["gemm"], {"M": 3, "K": 5}) == {"A": [3, 5], "B": [5, 64], "C": [3, 64]}


def test_constraints_derived_specialized(entries: dict) -> None:
    mlp, gemm = entries["mlp"], entries["gemm"]
    assert len(mlp["constraints"]) == 1, mlp["constraints"]
    for d in range(13):
        assert eval(mlp["constraints"][0], {"__builtins__": {}}, {"D": d}) == (d % 4 == 0)
    assert set(mlp["derived"]) == {"H"}
    for d in range(5):
        assert evaluate(mlp["derived"]["H"], {"D": d}) == 4 * d
    assert mlp["specialized"] == {}
    assert gemm["constraints"] == []
    assert gemm["derived"] == {}
    assert gemm["specialized"] == {"N": 64}


def test_workspace_and_kernels(entries: dict) -> None:
    env = {"B": 3, "D": 8, "H": 32, "M": 3, "K": 5, "N": 64}
    names = []
    for entry in entries.values():
        assert evaluate(entry["workspace_bytes"], env) >= 0
        assert entry["kernels"], entry["name"]
        for kernel in entry["kernels"]:
            assert isinstance(kernel["name"], str) and kernel["name"]
            assert isinstance(kernel["fused"], list) and kernel["fused"]
            assert all(isinstance(op, str) for op in kernel["fused"])
            assert evaluate(kernel["flops"], env) >= 0
            names.append(kernel["name"])
    assert len(names) == len(set(names)), names
    gemm_flops = sum(evaluate(k["flops"], env) for k in entries["gemm"]["kernels"])
    assert gemm_flops == 2 * 3 * 5 * 64


def test_prefixed_entries(tmp_path: Path) -> None:
    make_tree(tmp_path)
    catenc_run(tmp_path, "compile", MAIN, "-o", "out", "-S", "-I", "libdir", "--prefix", "q_")
    data = json.loads((tmp_path / "out" / "model.manifest.json").read_text())
    for entry in data["entries"]:
        assert entry["symbol"] == "q_" + entry["name"]
        assert entry["workspace_symbol"] == f"q_{entry['name']}_workspace_bytes"
        assert entry["prototype"].startswith(f"int q_{entry['name']}(")


# --------------------------------------------------------------------------- #
# the depfile
# --------------------------------------------------------------------------- #


def parse_depfile(path: Path) -> list[tuple[list[str], list[str]]]:
    """Make rules as (targets, prerequisites), continuation lines joined."""
    text = path.read_text().replace("\\\n", " ")
    rules = []
    for line in text.splitlines():
        if not line.strip():
            continue
        targets, sep, prereqs = line.partition(":")
        assert sep, f"not a make rule: {line!r}"
        rules.append((targets.split(), prereqs.split()))
    return rules


def check_deps_match_inputs(root: Path, deps: list[str], manifest: dict) -> None:
    """The depfile lists the files of manifest `inputs`; package files by a real path."""
    assert len(deps) == len(manifest["inputs"]), (deps, manifest["inputs"])
    by_path = {i["path"]: i["sha256"] for i in manifest["inputs"]}
    for dep in deps:
        assert (root / dep).is_file(), f"{dep} is not a file make can stat"
    user = [d for d in deps if d in by_path]
    assert set(user) == {p for p in by_path if not p.startswith("catenc:")}, (deps, by_path)
    packaged = [d for d in deps if d not in by_path]
    for display, digest in by_path.items():
        if display.startswith("catenc:"):
            tail = display[len("catenc:") :]
            match = [d for d in packaged if d.endswith(tail) and sha256(root / d) == digest]
            assert len(match) == 1, (display, deps)


def test_MD_writes_the_depfile_next_to_the_outputs(built: Path, manifest: dict) -> None:
    rules = parse_depfile(built / "out" / "model.d")
    assert len(rules) == 1, rules  # no -MP: no phony targets
    targets, deps = rules[0]
    assert len(targets) == 1 and (built / targets[0]).is_file(), targets
    assert Path(targets[0]).parent == Path("out"), targets
    check_deps_match_inputs(built, deps, manifest)


def test_MF_MT(tmp_path: Path) -> None:
    make_tree(tmp_path)
    (tmp_path / "deps").mkdir()
    args = ("-MD", "-MF", "deps/model.dep", "-MT", "my/target.so")
    catenc_run(tmp_path, "compile", MAIN, "-o", "out", "-S", *ARGS, *args)
    assert not (tmp_path / "out" / "model.d").exists(), "-MF names the depfile"
    rules = parse_depfile(tmp_path / "deps" / "model.dep")
    assert len(rules) == 1, rules
    assert rules[0][0] == ["my/target.so"]
    manifest = json.loads((tmp_path / "out" / "model.manifest.json").read_text())
    check_deps_match_inputs(tmp_path, rules[0][1], manifest)


def test_MP_adds_a_phony_target_per_dependency_but_the_main_file(tmp_path: Path) -> None:
    make_tree(tmp_path)
    catenc_run(tmp_path, "compile", MAIN, "-o", "out", "-S", *ARGS, "-MD", "-MP")
    rules = parse_depfile(tmp_path / "out" / "model.d")
    main_rule, phony = rules[0], rules[1:]
    assert all(prereqs == [] and len(targets) == 1 for targets, prereqs in phony), phony
    phony_targets = [targets[0] for targets, _ in phony]
    assert phony_targets == [d for d in main_rule[1] if d != MAIN], (main_rule, phony_targets)


def test_called_library_op_is_an_input(tmp_path: Path) -> None:
    """A composite of the bundled op library is read from the package: `catenc:ops/...`."""
    (tmp_path / "uses_lib.toml").write_text(
        '[composite.f]\ninputs = ["x: f32[N, D]"]\noutputs = ["y: f32[N, D]"]\nbody = "y = softmax(x) * 2"\n'
    )
    catenc_run(tmp_path, "compile", "uses_lib.toml", "-o", "out", "-S", "-MD")
    manifest = json.loads((tmp_path / "out" / "uses_lib.manifest.json").read_text())
    library = [i for i in manifest["inputs"] if i["path"].startswith("catenc:ops/")]
    assert library, manifest["inputs"]
    for item in library:
        assert item["sha256"] == sha256(package_file(item["path"])), item
    rules = parse_depfile(tmp_path / "out" / "uses_lib.d")
    check_deps_match_inputs(tmp_path, rules[0][1], manifest)
