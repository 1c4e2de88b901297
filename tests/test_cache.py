"""The compile cache (docs/cli.md, "Compile cache"): a hit writes exactly what a compile writes,
every key ingredient invalidates, concurrent compiles of one key are safe, a corrupt entry is
ignored and replaced, a failing compile stores nothing, and a hit loads none of the compiler.

The suite runs with the cache off (tests/conftest.py); each test here turns it on, in a directory
of its own, for the `catenc` processes it starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from catenc.resources import bundled_runtimes_dir

HIT = "catenc: outputs from the compile cache"
MAIN = """\
include = ["inc.toml"]

[composite.model]
inputs = ["x: f32[N, D]"]
outputs = ["y: f32[N, D]"]
params = { scale = 2.0 }
body = "y = twice(leaky_relu(x)) * scale"
"""
INCLUDE = """\
[composite.twice]
inputs = ["x: f32[N, D]"]
outputs = ["y: f32[N, D]"]
body = "y = x + x"
"""
SHADOW = """\
[composite.leaky_relu]
inputs = ["x: f32[N, D]"]
outputs = ["y: f32[N, D]"]
body = "y = x"
"""


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "model.toml").write_text(MAIN)
    (tmp_path / "inc.toml").write_text(INCLUDE)
    (tmp_path / "lib").mkdir()
    return tmp_path


def environment(work: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CATENC_NO_CACHE", "CATENC_VERIFY_IR")}
    return {**env, "CATENC_CACHE_DIR": str(work / "cache"), **extra}


def catenc(work: Path, *args: str, env: dict[str, str] | None = None, check: bool = True):
    done = subprocess.run(
        [sys.executable, "-m", "catenc", *args], cwd=work, env=env or environment(work), capture_output=True, text=True
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def compile_(work: Path, *args: str, env: dict[str, str] | None = None) -> bool:
    """Compile model.toml with -v; True when the outputs came from the cache."""
    return HIT in catenc(work, "compile", "model.toml", "-v", "-I", "lib", *args, env=env).stdout


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def entries(work: Path) -> int:
    root = work / "cache" / "compile" / "entries"
    return len(list(root.iterdir())) if root.is_dir() else 0


def test_a_hit_writes_what_a_compile_writes(work: Path):
    emits = ["--emit", "c,h,manifest,so,ir,schedule,loops", "--dump-after", "fuse-rows"]
    every = [*emits, "-MD", "-MP"]
    assert not compile_(work, "-o", "out", *every, env=environment(work, PYTHONHASHSEED="1"))
    written = contents(work / "out")
    assert {"model.c", "model.h", "model.manifest.json", "libmodel.so", "model.ir.txt", "model.d"} <= set(written)
    assert any(name.endswith(".fuse-rows.txt") for name in written)
    shutil.rmtree(work / "out")
    assert compile_(work, "-o", "out", *every, env=environment(work, PYTHONHASHSEED="2"))
    assert contents(work / "out") == written
    # elsewhere, with another depfile: the depfile names this request's paths
    assert compile_(work, "-o", "out2", *emits, "-MD", "-MF", "deps/x.d", "-MT", "target")
    catenc(
        work,
        "compile",
        "model.toml",
        "-I",
        "lib",
        "-o",
        "out3",
        *emits,
        "-MD",
        "-MF",
        "deps/y.d",
        "-MT",
        "target",
        "--no-cache",
    )
    assert contents(work / "out2") == contents(work / "out3")
    assert (work / "deps/x.d").read_text() == (work / "deps/y.d").read_text()
    assert (work / "deps/x.d").read_text().startswith("target: model.toml inc.toml ")
    # an unchanged output only gets a fresh mtime, as after a compile
    before = (work / "out" / "model.c").stat().st_mtime_ns
    assert compile_(work, "-o", "out", *every)
    assert (work / "out" / "model.c").stat().st_mtime_ns > before


def test_every_ingredient_of_the_key_invalidates(work: Path):
    assert not compile_(work, "-S", "-o", "out")
    assert compile_(work, "-S", "-o", "out")
    for option in (["-D", "N=4"], ["-O", "1"], ["--config", "VECTOR_WIDTH=4"], ["--prefix", "p_"], ["-D", "scale=3.0"]):
        assert not compile_(work, "-S", "-o", "out", *option), option
        assert compile_(work, "-S", "-o", "out", *option), option
    assert compile_(work, "-S", "-o", "out")  # the first entry is still there
    (work / "model.toml").write_text(MAIN + "# an edit\n")
    assert not compile_(work, "-S", "-o", "out")
    (work / "inc.toml").write_text(INCLUDE.replace("x + x", "x * 2.0"))
    assert not compile_(work, "-S", "-o", "out")
    assert "* 2.0f" in (work / "out" / "model.c").read_text() or "2.0" in (work / "out" / "model.c").read_text()
    assert compile_(work, "-S", "-o", "out")
    # an -I file that now shadows the op library's leaky_relu
    (work / "lib" / "mine.toml").write_text(SHADOW)
    assert not compile_(work, "-S", "-o", "out")
    assert "lib/mine.toml" in (work / "out" / "model.manifest.json").read_text()
    (work / "lib" / "mine.toml").write_text(SHADOW.replace("y = x", "y = x * 0.5"))
    assert not compile_(work, "-S", "-o", "out")
    assert compile_(work, "-S", "-o", "out")


def test_runtime_compiler_and_tuning_invalidate(work: Path):
    descriptor = work / "mine.py"
    descriptor.write_text((bundled_runtimes_dir() / "clang.py").read_text())
    assert not compile_(work, "-S", "-o", "out", "--runtime", "mine.py")
    assert compile_(work, "-S", "-o", "out", "--runtime", "mine.py")
    descriptor.write_text(descriptor.read_text() + "# an edit\n")
    assert not compile_(work, "-S", "-o", "out", "--runtime", "mine.py")

    real = shutil.which("clang") or shutil.which("gcc") or shutil.which("cc")
    assert real, "a C compiler is needed"
    wrapper = work / "bin" / "mycc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    with_cc = environment(work, CC=str(wrapper))
    assert not compile_(work, "-o", "out", env=with_cc)
    assert compile_(work, "-o", "out", env=with_cc)
    wrapper.write_text(f'#!/bin/sh\n# another compiler\nexec {real} "$@"\n')
    assert not compile_(work, "-o", "out", env=with_cc)
    assert compile_(work, "-o", "out", env=with_cc)

    tuning = work / "model.tuning.json"
    tuning.write_text(json.dumps({"format": "catenc.tuning/1", "entries": []}))
    assert not compile_(work, "-S", "-o", "out", "--tuning", tuning.name)
    assert compile_(work, "-S", "-o", "out", "--tuning", tuning.name)
    tuning.write_text(json.dumps({"format": "catenc.tuning/1", "entries": []}, indent=2))
    assert not compile_(work, "-S", "-o", "out", "--tuning", tuning.name)


def test_concurrent_compiles_of_one_key(work: Path):
    command = [sys.executable, "-m", "catenc", "compile", "model.toml", "-I", "lib"]
    env = environment(work)
    runs = [subprocess.Popen([*command, "-o", f"out{n}"], cwd=work, env=env, stderr=subprocess.PIPE) for n in (1, 2)]
    assert [run.wait() for run in runs] == [0, 0], [run.stderr.read() for run in runs]
    assert contents(work / "out1") == contents(work / "out2")
    assert entries(work) == 1
    assert compile_(work, "-o", "out3")
    assert contents(work / "out3") == contents(work / "out1")


@pytest.mark.parametrize(
    "damage",
    [
        "truncate output",
        "edit output",
        "remove output",
        "garbage entry record",
        "truncate entry record",
        "a path in the entry record",
        "garbage index",
        "truncate index",
        "deeply nested index",
        "remove entry",
    ],
)
def test_a_corrupt_entry_is_ignored_and_replaced(work: Path, damage: str):
    assert not compile_(work, "-o", "out")
    written = contents(work / "out")
    root = work / "cache" / "compile"
    (entry,) = (root / "entries").iterdir()
    (index,) = (root / "index").iterdir()
    if damage == "truncate output":
        (entry / "libmodel.so").write_bytes((entry / "libmodel.so").read_bytes()[:100])
    elif damage == "edit output":  # same size, one byte changed
        (entry / "model.h").write_text((entry / "model.h").read_text().replace("int64_t N", "int64_t M", 1))
    elif damage == "remove output":
        (entry / "model.c").unlink()
    elif damage == "garbage entry record":
        (entry / "entry.json").write_text("{not json")
    elif damage == "truncate entry record":
        (entry / "entry.json").write_text((entry / "entry.json").read_text()[:60])
    elif damage == "a path in the entry record":
        record = json.loads((entry / "entry.json").read_text())
        record["outputs"][0][1] = "../../escaped.c"  # from the staging directory: work/escaped.c
        (work / "cache" / "compile" / "escaped.c").write_bytes(written["model.c"])
        (entry / "entry.json").write_text(json.dumps(record))
    elif damage == "garbage index":
        index.write_text("[1, 2")
    elif damage == "truncate index":
        index.write_text(index.read_text()[:80])
    elif damage == "deeply nested index":
        index.write_text("[" * 100000 + "]" * 100000)
    else:
        shutil.rmtree(entry)
    done = catenc(work, "compile", "model.toml", "-I", "lib", "-v", "-o", "out2")
    assert HIT not in done.stdout and "Traceback" not in done.stderr and not done.stderr
    assert not (work / "escaped.c").exists() and not (work / "out2" / "escaped.c").exists()
    assert contents(work / "out2") == written
    assert compile_(work, "-o", "out3")
    assert contents(work / "out3") == written


def test_stats_clear_and_the_off_switches(work: Path):
    assert not compile_(work, "-S", "-o", "out")
    assert compile_(work, "-S", "-o", "out")
    stats = catenc(work, "cache", "stats").stdout
    assert f"location: {work / 'cache' / 'compile'}" in stats
    assert "entries:  1" in stats and "hits:     1" in stats and "misses:   1" in stats
    assert "removed 1 entry" in catenc(work, "cache", "clear").stdout
    assert "entries:  0" in catenc(work, "cache", "stats").stdout
    assert not compile_(work, "-S", "-o", "out", "--no-cache")
    assert not compile_(work, "-S", "-o", "out", env=environment(work, CATENC_NO_CACHE="1"))
    assert entries(work) == 0
    assert (
        "(off: CATENC_NO_CACHE is set)"
        in catenc(work, "cache", "stats", env=environment(work, CATENC_NO_CACHE="1")).stdout
    )


def test_a_failing_compile_stores_nothing(work: Path):
    (work / "inc.toml").write_text(INCLUDE.replace("x + x", "x + q"))
    done = catenc(work, "compile", "model.toml", "-S", "-o", "out", check=False)
    assert done.returncode == 1 and "error" in done.stderr
    done = catenc(work, "compile", "samples.toml", "-o", "out", check=False)
    assert done.returncode == 1
    (work / "inc.toml").write_text(INCLUDE)
    done = catenc(work, "compile", "model.toml", "-o", "out", "--config", "CFLAGS=-fno-such-flag", check=False)
    assert done.returncode == 1
    assert entries(work) == 0


def test_test_runs_on_a_hit(work: Path):
    catenc(work, "compile", "model.toml", "-o", "out")
    done = catenc(work, "compile", "model.toml", "-v", "-o", "out", "--test", "N=3,D=5")
    assert HIT in done.stdout
    assert "model: y  max abs err" in done.stdout and done.stdout.rstrip().endswith("ok")


def test_a_hit_loads_none_of_the_compiler(work: Path):
    catenc(work, "compile", "model.toml", "-S", "-o", "out")
    program = (
        "import sys\n"
        "from catenc.cli import main\n"
        "sys.argv = ['catenc', 'compile', 'model.toml', '-S', '-o', 'out', '-v']\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    assert not exit.code, exit.code\n"
        "heavy = ('numpy', 'jinja2', 'catenc.frontend', 'catenc.ir', 'catenc.codegen', 'catenc.runtime',"
        " 'catenc.build', 'catenc.driver')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=work, env=environment(work), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert HIT in done.stdout
    assert done.stdout.strip().endswith("[]"), done.stdout


def test_least_recently_used_entries_go_beyond_the_size_limit(work: Path):
    assert not compile_(work, "-S", "-o", "out")
    (entry,) = (work / "cache" / "compile" / "entries").iterdir()
    size = sum(path.stat().st_size for path in entry.iterdir())
    room_for_two = environment(work, CATENC_CACHE_SIZE=str(size * 5 // 2))
    assert not compile_(work, "-S", "-o", "out", "-D", "N=4", env=room_for_two)
    assert compile_(work, "-S", "-o", "out", env=room_for_two)  # now the most recently used
    assert not compile_(work, "-S", "-o", "out", "-D", "N=5", env=room_for_two)
    assert entries(work) == 2
    assert compile_(work, "-S", "-o", "out", env=room_for_two)
    assert not compile_(work, "-S", "-o", "out", "-D", "N=4", env=room_for_two)
    lots = environment(work, CATENC_CACHE_SIZE="lots")
    bad = catenc(work, "compile", "model.toml", "-S", "-o", "out", env=lots, check=False)
    assert bad.returncode == 1 and "CATENC_CACHE_SIZE=lots: expected a size such as 500M or 2G" in bad.stderr


def _index_files(work: Path) -> set[Path]:
    return set((work / "cache" / "compile" / "index").iterdir())


def test_an_index_naming_another_compiles_entry_is_a_miss(work: Path):
    assert not compile_(work, "-o", "out")
    plain = contents(work / "out")
    (plain_index,) = _index_files(work)
    assert not compile_(work, "-o", "out", "-D", "N=3")
    assert "int64_t N" not in (work / "out" / "model.h").read_text()
    (fixed_index,) = _index_files(work) - {plain_index}
    record = json.loads(plain_index.read_text())
    record["entry"] = json.loads(fixed_index.read_text())["entry"]
    plain_index.write_text(json.dumps(record))
    assert not compile_(work, "-o", "out")
    assert contents(work / "out") == plain
    assert "int64_t N" in (work / "out" / "model.h").read_text()
    assert compile_(work, "-o", "out")  # the index names its own entry again
    assert contents(work / "out") == plain
