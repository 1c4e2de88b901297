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

`CC=clang` is set for the subprocesses so the flags above meet the compiler they are for.

Each `-k` pattern of a representative subset runs once (two at a time) with both sanitizers
(UBSan alone where the ASan runtime is missing); its JSON report must have no `fail` or `error`
cell, the exit code must be 0, and the output must hold no sanitizer report. Two positive
controls prove the set-up catches what it should: a runtime descriptor whose renderer spells
integer `+` as plain C `+` (signed overflow: UBSan must report it) and one whose loads read one
element past the end (ASan must report it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

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
TIMEOUT = 300

CLANG = shutil.which("clang")  # `make setup` installs it: its absence fails these tests, never skips them


def _runtime_file(name: str) -> Path | None:
    out = subprocess.run([CLANG, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    path = Path(out)
    return path if path.is_absolute() and path.is_file() else None


UBSAN_RT = _runtime_file("libclang_rt.ubsan_standalone-x86_64.so") if CLANG else None
ASAN_RT = _runtime_file("libclang_rt.asan-x86_64.so") if CLANG else None

UBSAN_FLAGS = "-fsanitize=undefined -fno-sanitize-recover=all -shared-libsan"
ASAN_FLAGS = "-fsanitize=address -fno-omit-frame-pointer"


def sanitizer_setup(address: bool) -> tuple[str, dict[str, str]]:
    """(CFLAGS, environment) for a test-runtime subprocess."""
    assert UBSAN_RT is not None, "clang's shared UBSan runtime (libclang_rt.ubsan_standalone) is not installed"
    env = dict(os.environ)
    env["CC"] = "clang"
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(UBSAN_RT.parent), env.get("LD_LIBRARY_PATH")]))
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    flags = UBSAN_FLAGS
    if address:
        assert ASAN_RT is not None, "clang's shared ASan runtime is not installed"
        env["LD_PRELOAD"] = str(ASAN_RT)
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
        flags = f"{ASAN_FLAGS} {UBSAN_FLAGS}"
    return flags, env


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
def sanitized_runs(tmp_path_factory) -> dict[str, tuple[str, Path, subprocess.CompletedProcess]]:
    """pattern -> (sanitizers used, run directory, finished test-runtime), two runs at a time."""
    address = ASAN_RT is not None
    flags, env = sanitizer_setup(address)
    base = tmp_path_factory.mktemp("sanitized")
    used = "address+undefined" if address else "undefined"

    def one(index: int, pattern: str):
        directory = base / f"run{index}"
        return pattern, (
            used,
            directory,
            run_test_runtime(directory, env, "-k", pattern, "--config", f"CFLAGS={flags}"),
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, range(len(PATTERNS)), PATTERNS))


def _report(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"


@pytest.mark.parametrize("pattern", PATTERNS)
def test_op_subset_is_clean_under_sanitizers(pattern, sanitized_runs):
    used, directory, result = sanitized_runs[pattern]
    text = f"-k {pattern} under {used}: {_report(result)}"
    output = result.stdout + result.stderr
    found = [marker for marker in SANITIZER_REPORTS if marker in output]
    assert not found, f"sanitizer report {found}\n{text}"
    assert "Traceback" not in output and "internal compiler error" not in output, text
    assert result.returncode == 0, text
    summary = [line for line in result.stdout.splitlines() if " passed, " in line]
    assert summary and not summary[-1].startswith("0 passed"), text
    assert " 0 failed, 0 error" in summary[-1], text
    data = json.loads((directory / "R.json").read_text())
    assert data["schema"] == "catenc.coverage/1" and data["ops"], text
    for op in data["ops"]:
        for dtype, cell in op["cells"].items():
            assert cell["status"] in ("pass", "xfail", "unsupported"), (op["name"], dtype, cell)


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
from catenc.runtime import CRuntime


class SignedOverflow(CRenderer):
    # integer + as plain C +: signed overflow, undefined behaviour
    binary_int = {**CRenderer.binary_int, "add": "({0} + {1})"}


RUNTIME = CRuntime(name="ubcontrol", renderer=SignedOverflow)
"""

OOB_RUNTIME = """
from catenc.codegen.c import CRenderer
from catenc.runtime import CRuntime


class OffByOne(CRenderer):
    # every load reads one element further: the last one is past the end of its buffer
    def flat_index(self, index, shape):
        return f"({super().flat_index(index, shape)} + 1)"


RUNTIME = CRuntime(name="oobcontrol", renderer=OffByOne)
"""


def _control(tmp_path: Path, runtime_text: str, address: bool) -> subprocess.CompletedProcess:
    flags, env = sanitizer_setup(address)
    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "control.toml").write_text(textwrap.dedent(CONTROL_OPS))
    runtime = tmp_path / "control_rt.py"
    runtime.write_text(textwrap.dedent(runtime_text))
    args = ("--runtime", str(runtime), "--ops", str(ops), "-k", "zz_control", "--no-primitives")
    return run_test_runtime(tmp_path / "run", env, *args, "--config", f"CFLAGS={flags}")


def test_control_ubsan_reports_signed_overflow(tmp_path):
    result = _control(tmp_path, UB_RUNTIME, address=False)
    output = result.stdout + result.stderr
    assert "runtime error:" in output and "signed integer overflow" in output, _report(result)
    assert result.returncode != 0


def test_control_asan_reports_out_of_bounds_read(tmp_path):
    result = _control(tmp_path, OOB_RUNTIME, address=True)
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
