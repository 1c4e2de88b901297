"""The op library under sanitizers: no undefined behaviour, no out-of-bounds access.

`catenc test-runtime` builds each op into a shared library with the user's `--config CFLAGS`
and loads it into its own Python process with ctypes, so the sanitizer runtime has to be
loadable there. What works (clang 14, Linux x86-64), and what this file uses:

* UndefinedBehaviorSanitizer: `-fsanitize=undefined -fno-sanitize-recover=all -shared-libsan`.
  Plain `-fsanitize=undefined` links no runtime into a shared library (clang links it only into
  executables), so loading the library fails on `__ubsan_handle_*`; `-fsanitize-minimal-runtime`
  has the same problem. `-shared-libsan` makes the library depend on
  `libclang_rt.ubsan_standalone-x86_64.so`, found through `LD_LIBRARY_PATH` (the directory
  `clang -print-file-name=...` gives). `-fno-sanitize-recover=all` turns every report into an
  abort, so undefined behaviour cannot hide behind a passing cell.
* AddressSanitizer, where its runtime exists: additionally `-fsanitize=address`, with the
  runtime (`clang -print-file-name=libclang_rt.asan-x86_64.so`) in `LD_PRELOAD` of the
  test-runtime subprocess (it must come first, before libc's malloc is used) and
  `ASAN_OPTIONS=detect_leaks=0` (the Python interpreter itself is not leak-clean at exit).
  `--config` splits on commas, so the two sanitizers are two flags, not `-fsanitize=a,u`.
* `-O0` last in CFLAGS (the last `-O` wins over the runtime's own): the C compiler keeps every
  load, store and arithmetic check as written, and builds an instrumented library in a third of
  the time it takes at -O2 (2.3 s against 0.8 s for the gemm sample here). catenc's own lowering
  (tiles, vectors, the packed gemm driver) is what it is at the runtime's level either way.

gcc 12 needs neither trick for UBSan (it links its shared runtime, libubsan.so.1, into a shared
library); its ASan runtime (`gcc -print-file-name=libasan.so`) goes in `LD_PRELOAD` likewise.
`make setup` installs both compilers' runtimes (libclang-rt-N-dev, libgcc-N-dev).

`--config CC=...` makes each subprocess build with the compiler the flags are for. Each compiler
(tests/toolchains.py) runs its share of a representative subset of `-k` patterns (the gemm driver
under both, each other pattern under one: RUNS) in one test-runtime process (`-k a,b,...`: an op
family and dtype is one library) with both sanitizers, in every dtype but f64; the ops of each
pattern must have only `pass`, `xfail` or `unsupported` cells in the JSON report, the exit code
must be 0, and the output must hold no sanitizer report. Two positive
controls prove the set-up catches what it should: a runtime descriptor whose renderer spells
integer `+` as plain C `+` (signed overflow: UBSan must report it) and one whose loads read one
element past the end (ASan must report it).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from toolchains import COMPILERS, require

from catenc.dtypes import DTYPES as DTYPES_ALL
from catenc.testing.coverage import name_matches

PATTERNS = [
    # contractions run through the packed gemm driver (packing, edge tiles, epilogues)
    "gemm",
    "bmm",
    "linear",
    "softmax",
    "layernorm",
    "conv2d",
    "max_pool2d",
    "embedding",
    "quantize_linear",
    "attention",
    "cumsum",
    "reduce_sum",
    # the language's own operators where C has undefined behaviour to avoid: float -> int casts
    # (saturating) and integer floor division (by zero too)
    "prim_cast_i32",
    "prim_floordiv",
]
SANITIZER_REPORTS = (
    "runtime error:",
    "ERROR: AddressSanitizer",
    "ERROR: LeakSanitizer",
    "SUMMARY: AddressSanitizer",
    "SUMMARY: UndefinedBehaviorSanitizer",
)
# The packed gemm driver under both compilers, every other pattern under one of them in turn: the
# generated C is the same text for both, and the positive controls below prove that each
# compiler's set-up reports what it should.
RUNS = {compiler: [PATTERNS[0], *PATTERNS[1 + n :: len(COMPILERS)]] for n, compiler in enumerate(COMPILERS)}
TIMEOUT = 900  # every pattern in one run
# Every dtype but f64, whose kernels are f32's at half the lanes (a sixth of the run's builds).
DTYPES = ",".join(d for d in DTYPES_ALL if d != "f64")

UBSAN_FLAGS = {
    "clang": "-fsanitize=undefined -fno-sanitize-recover=all -shared-libsan",
    "gcc": "-fsanitize=undefined -fno-sanitize-recover=all",
}
ASAN_FLAGS = "-fsanitize=address -fno-omit-frame-pointer"
# compiler -> (its shared UBSan runtime, when a library must be told where it is; its ASan runtime)
RUNTIMES = {
    "clang": ("libclang_rt.ubsan_standalone-x86_64.so", "libclang_rt.asan-x86_64.so"),
    "gcc": (None, "libasan.so"),
}


def _runtime_file(compiler: str, name: str) -> Path:
    out = subprocess.run([require(compiler), f"-print-file-name={name}"], capture_output=True, text=True)
    path = Path(out.stdout.strip())
    assert path.is_absolute() and path.is_file(), f"{compiler}'s sanitizer runtime {name} is not installed (make setup)"
    return path.resolve()


def sanitizer_setup(compiler: str, address: bool) -> tuple[str, dict[str, str]]:
    """(--config value, environment) for a test-runtime subprocess."""
    ubsan, asan = RUNTIMES[compiler]
    env = dict(os.environ, UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    if ubsan is not None:
        directory = str(_runtime_file(compiler, ubsan).parent)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [directory, env.get("LD_LIBRARY_PATH")]))
    flags = f"{UBSAN_FLAGS[compiler]} -O0"
    if address:
        env["LD_PRELOAD"] = str(_runtime_file(compiler, asan))
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
        flags = f"{ASAN_FLAGS} {flags}"
    return f"CC={compiler},CFLAGS={flags}", env


def run_test_runtime(directory: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    directory.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "catenc", "test-runtime", "-o", "R.md", "--json", "R.json", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.fixture(scope="module")
def sanitized_runs(tmp_path_factory) -> Callable[[str], tuple[str, Path, subprocess.CompletedProcess]]:
    """compiler -> (sanitizers used, run directory, finished test-runtime) of that compiler's
    patterns at once (run on first use): one process, each op family and dtype one library."""

    @functools.cache
    def run(compiler: str) -> tuple[str, Path, subprocess.CompletedProcess]:
        config, env = sanitizer_setup(compiler, address=True)
        directory = tmp_path_factory.mktemp(f"sanitized-{compiler}")
        patterns = ",".join(RUNS[compiler])
        result = run_test_runtime(directory, env, "-k", patterns, "--dtypes", DTYPES, "--config", config)
        return f"{compiler} address+undefined", directory, result

    return run


def _report(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"


@pytest.mark.parametrize(
    ("compiler", "pattern"), [(compiler, pattern) for compiler, patterns in RUNS.items() for pattern in patterns]
)
def test_op_subset_is_clean_under_sanitizers(compiler, pattern, sanitized_runs):
    used, directory, result = sanitized_runs(compiler)
    text = f"under {used}: {_report(result)}"
    output = result.stdout + result.stderr
    found = [marker for marker in SANITIZER_REPORTS if marker in output]
    assert not found, f"sanitizer report {found}\n{text}"
    assert "Traceback" not in output and "internal compiler error" not in output, text
    assert result.returncode == 0, text
    summary = [line for line in result.stdout.splitlines() if " passed, " in line]
    assert summary and " 0 failed, 0 error" in summary[-1], text
    data = json.loads((directory / "R.json").read_text())
    assert data["schema"] == "catenc.coverage/1", text
    ops = [op for op in data["ops"] if name_matches(op["name"], pattern)]
    assert ops, f"no op matches {pattern}: {text}"
    cells = [(op["name"], dtype, cell) for op in ops for dtype, cell in op["cells"].items()]
    for name, dtype, cell in cells:
        assert cell["status"] in ("pass", "xfail", "unsupported"), (name, dtype, cell)
    assert any(cell["status"] == "pass" for _, _, cell in cells), (pattern, cells)


# --------------------------------------------------------------------------- #
# positive controls: the set-up reports what it should
# --------------------------------------------------------------------------- #

CONTROL_OPS = """
[composite.zz_control]
doc = "x + 2147483600, whose i32 sum overflows for the inputs test-runtime draws"
types = { T = ["i32"] }
inputs = ["x: T[N]"]
outputs = ["y: T[N]"]
body = "y = x + 2147483600"
test.sizes = { N = 7 }
test.ranges = { x = [100, 1000] }
test.reference = '''
def reference(x, **_):
    return (x.astype(np.int64) + 2147483600).astype(np.int32)
'''
"""

UB_RUNTIME = """
from catenc.codegen.c import CRenderer
from catenc.runtime.descriptor import CRuntime


class SignedOverflow(CRenderer):
    # integer + as plain C +: signed overflow, undefined behaviour
    binary_int = {**CRenderer.binary_int, "add": "({0} + {1})"}


RUNTIME = CRuntime(name="ubcontrol", renderer=SignedOverflow)
"""

OOB_RUNTIME = """
from catenc.codegen.c import CRenderer
from catenc.runtime.descriptor import CRuntime


class OffByOne(CRenderer):
    # every load reads one element further: the last one is past the end of its buffer
    def flat_index(self, index, shape):
        return f"({super().flat_index(index, shape)} + 1)"


RUNTIME = CRuntime(name="oobcontrol", renderer=OffByOne)
"""


def _control(tmp_path: Path, runtime_text: str, compiler: str, address: bool) -> subprocess.CompletedProcess:
    config, env = sanitizer_setup(compiler, address)
    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "control.toml").write_text(textwrap.dedent(CONTROL_OPS))
    runtime = tmp_path / "control_rt.py"
    runtime.write_text(textwrap.dedent(runtime_text))
    args = ("--runtime", str(runtime), "--ops", str(ops), "-k", "zz_control", "--no-primitives")
    # The sanitizer aborts the run, so its scratch directory stays: in tmp_path, not in /tmp.
    return run_test_runtime(tmp_path / "run", {**env, "TMPDIR": str(tmp_path)}, *args, "--config", config)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_control_ubsan_reports_signed_overflow(tmp_path, compiler):
    result = _control(tmp_path, UB_RUNTIME, compiler, address=False)
    output = result.stdout + result.stderr
    assert "runtime error:" in output and "signed integer overflow" in output, _report(result)
    assert result.returncode != 0


@pytest.mark.parametrize("compiler", COMPILERS)
def test_control_asan_reports_out_of_bounds_read(tmp_path, compiler):
    result = _control(tmp_path, OOB_RUNTIME, compiler, address=True)
    output = result.stdout + result.stderr
    assert "ERROR: AddressSanitizer" in output, _report(result)
    assert result.returncode != 0


def test_plain_ubsan_flags_are_a_user_error_not_an_internal_one(tmp_path):
    """`-fsanitize=undefined` without a loadable runtime makes libraries that cannot be loaded:
    that is the user's configuration (an `error` cell or exit 1), never an internal error."""
    env = dict(os.environ, CC="clang", TMPDIR=str(tmp_path))
    result = run_test_runtime(tmp_path / "run", env, "-k", "cumsum", "--config",
                          "CFLAGS=-fsanitize=undefined -fno-sanitize-recover=all")  # fmt: skip
    output = result.stdout + result.stderr
    assert "Traceback" not in output, _report(result)
    assert result.returncode != 4 and "internal compiler error" not in output, _report(result)
    assert result.returncode in (1, 3), _report(result)
