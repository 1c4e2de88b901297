"""Reproducible, atomic outputs of `catenc compile` (docs/cli.md): byte-identical for identical
inputs and options, whatever the working directory or hash seed; no path of the build machine;
rewritten only when changed; nothing partial after a failure; concurrent runs are safe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import catenc

MODEL = """\
include = ["lib/inc.toml"]

[composite.mlp]
doc = "Two layers; the hidden width is derived."
inputs = ["x: f32[B, D]", "w1: f32[D, H]", "w2: f32[H, D]", "alpha: f32"]
outputs = ["y: f32[B, D]", "total: f32"]
where = ["H = 4*D", "D % 4 == 0", "B <= 4096"]
params = { eps = 1e-5, causal = true }
body = \"\"\"
h = gelu(x @ w1) + eps
y = shift(h @ w2) * alpha
total = sum(y)
\"\"\"

[composite.attention]
doc = "Causal attention (the scores live in the workspace)."
inputs = ["q: f32[T, E]", "k: f32[T, E]", "v: f32[T, E]"]
outputs = ["o: f32[T, E]"]
body = \"\"\"
s[i, j] = sum[d](q[i, d] * k[j, d]) * 0.125
m[i, j] = where(j <= i, s[i, j], -inf)
p = exp(m - max(m, axis=-1, keepdims=True))
o = (p / sum(p, axis=-1, keepdims=True)) @ v
\"\"\"

[composite.conv]
inputs = ["x: f64[N, C, L]", "w: f64[K, C, 3]"]
outputs = ["y: f64[N, K, L]"]
body = \"\"\"
y[n, k, l] = sum[c, r](where((l + r >= 1) & (l + r <= L), x[n, c, l + r - 1], 0.0) * w[k, c, r])
\"\"\"
"""

INCLUDED = """\
[composite.shift]
inputs = ["a: f32[P, Q]"]
outputs = ["b: f32[P, Q]"]
body = "b = a + 1"
"""

MAIN = "src/model.toml"
ALL_KINDS = "c,h,manifest,so,o,a,ir,schedule,loops"
DEFAULT_KINDS = "c,h,manifest,so"


def catenc_run(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "catenc", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result


def make_tree(root: Path) -> Path:
    (root / "src" / "lib").mkdir(parents=True)
    (root / MAIN).write_text(MODEL)
    (root / "src" / "lib" / "inc.toml").write_text(INCLUDED)
    return root


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under directory (hidden ones included), by relative path."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def times(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_ino) for p in directory.iterdir() if p.is_file()}


def assert_same(a: dict[str, bytes], b: dict[str, bytes]) -> None:
    assert sorted(a) == sorted(b)
    differ = [name for name in a if a[name] != b[name]]
    assert not differ, f"not byte-identical: {differ}"


def build(root: Path, *args: str, env: dict | None = None, kinds: str = ALL_KINDS) -> dict[str, bytes]:
    """A fresh compile into root/out; returns what it wrote."""
    out = root / "out"
    if out.exists():
        shutil.rmtree(out)
    ok(catenc_run(root, "compile", MAIN, "-o", "out", "--emit", kinds, *args, env=env))
    return snapshot(out)


# --------------------------------------------------------------------------- #
# byte-identical outputs
# --------------------------------------------------------------------------- #


def test_two_runs_are_byte_identical(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    first = build(root)
    assert {"model.c", "model.h", "model.manifest.json", "libmodel.so", "model.o"} <= set(first)
    assert_same(first, build(root))


def test_hash_seed_changes_nothing(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    first = build(root, env={"PYTHONHASHSEED": "0"}, kinds=DEFAULT_KINDS)
    assert_same(first, build(root, env={"PYTHONHASHSEED": "4242"}, kinds=DEFAULT_KINDS))


REPO = Path(__file__).resolve().parent.parent
SAMPLES = sorted(str(p.relative_to(REPO)) for p in [*REPO.glob("samples/*.toml"), *REPO.glob("samples/*.yaml")]) + [
    "samples/gpt2/gpt2.toml"
]
GPU_SAMPLES = ("samples/attention.toml", "samples/layernorm.toml", "samples/mlp.yaml")

# Compiles, in one process, every sample (and a few for the GPU runtimes) and every op of the
# library at its first dtype, as `catenc test-runtime` instantiates them, into argv[1].
SEED_RUN = """
import sys
from pathlib import Path
from catenc.build import BuildRequest, build
from catenc.cli import main
from catenc.driver import plan_entry, search_dirs
from catenc.plan import FilePlan, Options
from catenc.testing.coverage import BUILTIN_ROWS, library_ops, make_cases, op_alias, op_dtypes
from catenc.frontend.composites import Library, load_composite_file
from catenc.runtime.descriptor import load_runtime

out = Path(sys.argv[1])
samples, gpu_samples = sys.argv[2].split(","), sys.argv[3].split(",")
dumps = "c,h,manifest,ir,schedule,loops"
for sample in samples:
    for runtime in ("clang", "cuda", "opencl") if sample in gpu_samples else ("clang",):
        try:
            main(["compile", sample, "--runtime", runtime, "-S", "--emit", dumps, "-o", str(out / runtime)],
                 standalone_mode=False)
        except SystemExit as stop:
            assert stop.code in (0, None), (sample, runtime, stop.code)
ops = library_ops((), True)
cases = [c for c in make_cases(ops, None, None) if c.dtype == op_dtypes(c.op)[1][0]]
options = Options(load_runtime("clang"), {}, opt="2", include_dirs=(str(BUILTIN_ROWS),))
path = out / "ops" / "ops.toml"
path.parent.mkdir()
path.write_text("\\n".join(c.text for c in cases))
root = load_composite_file(str(path), path.name)
library = Library(root, search_dirs(options.include_dirs))
library.aliases.update({op_alias(c.op): c.op for c in cases})
entries = tuple(plan_entry(library.local[name], library, options) for c in cases for name in c.wrappers)
build(FilePlan(root, library, entries), options, BuildRequest(str(path), str(path.parent), tuple(dumps.split(","))))
"""


def test_samples_and_op_library_under_two_hash_seeds(tmp_path: Path) -> None:
    """Every sample and every op of the library, compiled under two hash seeds (in parallel
    subprocesses), give byte-identical sources, headers, manifests and stage dumps."""
    seeds = ("1", "2")
    args = [",".join(SAMPLES), ",".join(GPU_SAMPLES)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SEED_RUN, str(tmp_path / seed), *args],
            cwd=REPO,
            env={**os.environ, "PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in seeds
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out + err
    first = snapshot(tmp_path / seeds[0])
    assert {"clang/gpt2.c", "cuda/attention.cu", "opencl/mlp.cl", "ops/ops.c"} <= set(first)
    assert all(f"clang/{Path(s).stem}.manifest.json" in first for s in SAMPLES)
    for seed in seeds[1:]:
        assert_same(first, snapshot(tmp_path / seed))


def test_working_directory_changes_nothing(tmp_path: Path) -> None:
    """The same relative command in two copies of one tree, at different absolute places."""
    a = make_tree(tmp_path / "a")
    b = make_tree(tmp_path / "a much longer directory name" / "nested" / "b")
    assert_same(build(a), build(b))


def test_no_path_of_the_build_machine_in_any_output(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    outputs = build(root, "--config", "OMP=1")
    package_root = Path(catenc.__file__).resolve().parent.parent
    forbidden = {str(tmp_path), str(tmp_path.resolve()), str(package_root), str(Path.home())}
    forbidden.discard("/")
    for name, data in outputs.items():
        for path in forbidden:
            assert path.encode() not in data, f"{path} appears in {name}"


def test_absolute_file_path_changes_only_the_echoed_path(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    relative = build(root, kinds=DEFAULT_KINDS)
    absolute_path = str((root / MAIN).resolve())
    shutil.rmtree(root / "out")
    ok(catenc_run(root, "compile", absolute_path, "-o", "out", "--emit", DEFAULT_KINDS))
    absolute = snapshot(root / "out")
    assert sorted(relative) == sorted(absolute)
    for name in relative:
        if name.endswith((".so", ".o", ".a")):
            assert relative[name] == absolute[name], f"{name} depends on how FILE was named"
        elif name.endswith(".json"):
            continue
        else:
            check_only_echo_differs(name, relative[name], absolute[name], absolute_path)
    rel_manifest = json.loads(relative["model.manifest.json"])
    abs_manifest = json.loads(absolute["model.manifest.json"])
    assert rel_manifest["inputs"][0]["path"] == MAIN
    # paths of the inputs follow FILE as given (an included file's path is built from it)
    for rel_input, abs_input in zip(rel_manifest["inputs"], abs_manifest["inputs"]):
        r, a = rel_input["path"], abs_input["path"]
        assert a == r or (not r.startswith("catenc:") and abs_path_of(root, r).endswith(a)), (r, a)
        rel_input["path"] = abs_input["path"] = "echoed"
    for manifest in (rel_manifest, abs_manifest):
        for item in manifest["files"]:
            if not item["path"].endswith((".so", ".o", ".a")):
                item["sha256"] = "text"
    assert rel_manifest == abs_manifest


def abs_path_of(root: Path, relative: str) -> str:
    return str((root / relative).resolve())


def check_only_echo_differs(name: str, rel: bytes, absolute: bytes, abs_path: str) -> None:
    """Lines differ only where the relative run echoes MAIN and the absolute run echoes some
    tail of the absolute path in its place."""
    rel_lines, abs_lines = rel.decode().splitlines(), absolute.decode().splitlines()
    assert len(rel_lines) == len(abs_lines), name
    for r, a in zip(rel_lines, abs_lines):
        if r == a:
            continue
        assert MAIN in r, f"{name}: {r!r} != {a!r}"
        before, after = r.split(MAIN, 1)
        assert a.startswith(before) and a.endswith(after), f"{name}: {r!r} != {a!r}"
        echoed = a[len(before) : len(a) - len(after)]
        assert echoed and abs_path.endswith(echoed), f"{name}: {r!r} != {a!r}"


# --------------------------------------------------------------------------- #
# rewritten only when changed
# --------------------------------------------------------------------------- #


def age(directory: Path, when_ns: int = 1_000_000_000 * 10**9) -> None:
    for path in directory.iterdir():
        os.utime(path, ns=(when_ns, when_ns))


def test_identical_rerun_rewrites_nothing(tmp_path: Path) -> None:
    """Nothing is rewritten, but every output gets a fresh mtime, as after gcc: make then sees
    it newer than its inputs (docs/cli.md)."""
    root = make_tree(tmp_path)
    build(root, kinds=DEFAULT_KINDS)
    age(root / "out")
    before = times(root / "out")
    ok(catenc_run(root, "compile", MAIN, "-o", "out"))
    after = times(root / "out")
    assert {k: ino for k, (_, ino) in after.items()} == {k: ino for k, (_, ino) in before.items()}
    assert all(after[k][0] > before[k][0] for k in before), "unchanged outputs keep an mtime older than the input"


def test_only_changed_outputs_are_rewritten(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    old = build(root, kinds=DEFAULT_KINDS)
    age(root / "out")
    before = times(root / "out")
    (root / MAIN).write_text(MODEL.replace("Two layers;", "Two dense layers;"))
    ok(catenc_run(root, "compile", MAIN, "-o", "out"))
    new = snapshot(root / "out")
    after = times(root / "out")
    assert old["model.h"] != new["model.h"], "the doc is in the header"
    for name in old:
        if old[name] == new[name]:
            assert after[name][1] == before[name][1], f"{name} rewritten with the same content"
        else:
            assert after[name][1] != before[name][1], f"{name} changed but was not replaced"
        assert after[name][0] != before[name][0], f"{name} kept its old mtime"


# --------------------------------------------------------------------------- #
# failures leave nothing partial
# --------------------------------------------------------------------------- #

TYPE_ERROR = MODEL.replace("total = sum(y)", "total = sum(y) + cast(alpha, i32)")


def failing_runs(root: Path) -> list[tuple[str, tuple[str, ...], dict]]:
    crash_dir = root / "crashes"
    crash_dir.mkdir(exist_ok=True)
    return [
        ("type error", (), {}),
        ("no C compiler", (), {"CC": "/nonexistent/cc"}),
        ("compiler rejects flags", ("--config", "CFLAGS=-fno-such-flag"), {"TMPDIR": str(crash_dir)}),
    ]


def run_failing(root: Path, what: str, args: tuple[str, ...], env: dict) -> None:
    if what == "type error":
        (root / MAIN).write_text(TYPE_ERROR)
    result = catenc_run(root, "compile", MAIN, "-o", "out", *args, env=env)
    (root / MAIN).write_text(MODEL)
    assert result.returncode != 0, f"{what}: {result.stdout}{result.stderr}"


def test_failed_compile_into_a_new_directory_leaves_nothing(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    for what, args, env in failing_runs(root):
        run_failing(root, what, args, env)
        leftovers = snapshot(root / "out") if (root / "out").exists() else {}
        assert leftovers == {}, f"{what}: left {sorted(leftovers)}"


def test_failed_compile_keeps_the_previous_outputs(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    good = build(root, kinds=DEFAULT_KINDS)
    age(root / "out")
    before = times(root / "out")
    for what, args, env in failing_runs(root):
        run_failing(root, what, args, env)
        assert_same(good, snapshot(root / "out"))
        assert times(root / "out") == before, what


# --------------------------------------------------------------------------- #
# concurrent compiles into one directory
# --------------------------------------------------------------------------- #


def test_concurrent_compiles_into_one_directory(tmp_path: Path) -> None:
    reference = build(make_tree(tmp_path / "reference"), kinds=DEFAULT_KINDS)
    root = make_tree(tmp_path / "shared")
    for round_ in range(2):  # into a new directory, then into the filled one
        if round_ == 1:
            (root / "out" / "libmodel.so").unlink()
            (root / "out" / "model.c").write_text("stale\n")
        command = [sys.executable, "-m", "catenc", "compile", MAIN, "-o", "out"]
        procs = [subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
        results = [(p.wait(timeout=300), p.stderr.read().decode()) for p in procs]
        for p in procs:
            p.stdout.close()
            p.stderr.close()
        assert all(code == 0 for code, _ in results), results
        assert_same(reference, snapshot(root / "out"))
