"""Shared helpers of the numerical test suite: compile composite text in-process and load it.

Every numerical test file compiles its composites once per module (``compile_composites``
through a module-scoped fixture) and calls the entries at several size bindings, comparing
with numpy computed independently inside the test (never with ``catenc.testing.reference``).
"""

from __future__ import annotations

import itertools
import math
import os
import textwrap
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from catenc.build import BuildRequest, build
from catenc.driver import plan_file
from catenc.loader import Library, load
from catenc.plan import Options, WeightsMode
from catenc.runtime.descriptor import load_runtime

# Every compile of the suite, in-process or through `catenc` subprocesses, checks the IR's
# invariants after every pass (docs/cli.md, --verify-ir): a pass that breaks one fails its test.
os.environ["CATENC_VERIFY_IR"] = "1"
# No compile of the suite reads or fills the compile cache (docs/cli.md); tests/test_cache.py
# turns it on for its own compiles, in a directory of its own.
os.environ["CATENC_NO_CACHE"] = "1"
# The suite runs `python -m catenc` as a subprocess about a thousand times: each one reads catenc's
# bytecode from __pycache__ (ignored by git) instead of compiling every module again (0.3 s of CPU
# each), also where the environment says not to write bytecode.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Sizes every test binds a free symbol to: 1, primes, a larger non-multiple of 16.
SIZES = (1, 7, 13, 37)
# The same with 0, for composites where an empty dim is legal.
SIZES0 = (0, 1, 7, 13, 37)

# Collected first, in this order, so that `make test` hands them to its workers first (one file each
# to start with): the two files that fork children which run OpenMP code (a forked child hangs when
# its parent has OpenMP threads already, which a worker that ran other files has), then the files
# that take the most CPU (tests/test_sanitized_ops.py alone about a third of the suite), so that
# the other files fill in around them rather than one of them running alone at the end.
FIRST = (
    "test_fuzz_differential.py",
    "test_onnx_node_suite.py",
    "test_sanitized_ops.py",
    "test_random_schedules.py",
    "test_frontend_fuzz.py",
    "test_reproducible.py",
    "test_test_runtime.py",
    "test_cache.py",
    "test_cli.py",
    "test_reductions.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """FIRST's files first (in its order), then the others as collected."""
    rank = {name: n for n, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))


_RUNTIMES: dict[str, object] = {}
_COUNTER = itertools.count()


def runtime(name: str = "clang"):
    if name not in _RUNTIMES:
        _RUNTIMES[name] = load_runtime(name)
    return _RUNTIMES[name]


def compile_text(
    directory: Path,
    text: str,
    *,
    name: str | None = None,
    opt: str = "2",
    defines: Mapping[str, object] | None = None,
    include_dirs: tuple[str, ...] = (),
    extra_files: Mapping[str, str] | None = None,
    config: Mapping[str, str] | None = None,
    runtime_name: str = "clang",
    composites: tuple[str, ...] = (),
) -> Library:
    """Write ``text`` (a TOML composite file) into ``directory``, compile it and load it.

    ``extra_files`` are written next to it first (relative path -> text), for includes;
    ``composites``: the entries to build (as ``--composite``; none: all).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for rel, body in (extra_files or {}).items():
        target = directory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(body))
    stem = name or f"model{next(_COUNTER)}"
    path = directory / f"{stem}.toml"
    path.write_text(textwrap.dedent(text))
    out_dir = directory / f"out_{stem}_O{opt}"
    return compile_file(
        path,
        out_dir,
        opt=opt,
        defines=defines,
        include_dirs=include_dirs,
        config=config,
        runtime_name=runtime_name,
        composites=composites,
    )


def compile_file(
    path: str | Path,
    out_dir: str | Path,
    *,
    opt: str = "2",
    defines: Mapping[str, object] | None = None,
    include_dirs: tuple[str, ...] = (),
    config: Mapping[str, str] | None = None,
    runtime_name: str = "clang",
    weights: str = "baked",
    composites: tuple[str, ...] = (),
) -> Library:
    """Compile a composite file (TOML or YAML) in-process into out_dir and load it.

    config: runtime options (``{"OMP": "1"}`` ...), as ``--config``; runtime_name: a bundled
    runtime that runs here (``clang``, ``opencl``); weights: as ``--weights``.
    """
    rt = runtime(runtime_name)
    options = Options(
        rt,
        config=rt.validate_config(dict(config or {})),
        opt=opt,
        defines=dict(defines or {}),
        include_dirs=tuple(include_dirs),
        weights=WeightsMode(weights),
        composites=tuple(composites),
    )
    plan = plan_file(str(path), options)
    request = BuildRequest(str(path), str(out_dir), ("c", "h", "manifest", "so"))
    written = build(plan, options, request)
    return load(written["manifest"])


_CACHE: dict[str, Library | Exception] = {}


@pytest.fixture(scope="session")
def compile_composites(tmp_path_factory):
    """``compile_composites(text, **kw) -> Library``, each in a fresh directory.

    Results are cached by text and options, failures included: a composite file that does
    not compile fails every test using it, but is compiled only once.
    """

    def compile_(text: str, **kw) -> Library:
        key = repr((text, sorted(kw.items())))
        if key not in _CACHE:
            try:
                _CACHE[key] = compile_text(tmp_path_factory.mktemp("catenc"), text, **kw)
            except Exception as error:  # re-raised for every user
                _CACHE[key] = error
        result = _CACHE[key]
        if isinstance(result, Exception):
            raise result
        return result

    return compile_


# ------------------------------------------------------------------ numpy references


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(shape, dtype=np.float32, seed: int = 0) -> np.ndarray:
    return rng(seed).standard_normal(shape).astype(dtype)


def uniform(shape, lo, hi, dtype=np.float32, seed: int = 0) -> np.ndarray:
    return rng(seed).uniform(lo, hi, shape).astype(dtype)


def randint(shape, lo, hi, dtype, seed: int = 0) -> np.ndarray:
    """Integers in [lo, hi] of dtype (hi inclusive)."""
    return rng(seed).integers(int(lo), int(hi), size=shape, endpoint=True, dtype=dtype)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def np_erf(x: np.ndarray) -> np.ndarray:
    return _erf(np.asarray(x, dtype=np.float64))


def np_gelu(x: np.ndarray) -> np.ndarray:
    x64 = np.asarray(x, dtype=np.float64)
    return x64 * 0.5 * (1.0 + np_erf(x64 / math.sqrt(2.0)))


def np_gelu_tanh(x: np.ndarray) -> np.ndarray:
    x64 = np.asarray(x, dtype=np.float64)
    return 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64**3)))


def np_sigmoid(x: np.ndarray) -> np.ndarray:
    x64 = np.asarray(x, dtype=np.float64)
    return 1.0 / (1.0 + np.exp(-x64))


def np_softplus(x: np.ndarray) -> np.ndarray:
    x64 = np.asarray(x, dtype=np.float64)
    return np.logaddexp(0.0, x64)


TOLS = {
    np.dtype(np.float32): dict(rtol=1e-5, atol=1e-6),
    np.dtype(np.float64): dict(rtol=1e-12, atol=1e-13),
    np.dtype(np.float16): dict(rtol=1e-3, atol=1e-4),
}


def assert_close(actual, expected, *, rtol=None, atol=None, dtype=None, err_msg=""):
    """Compare an output with a numpy reference: shape, dtype and values (NaNs equal).

    Integer and bool outputs must match exactly; float ones within the per-dtype default
    tolerance unless given.
    """
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if dtype is not None:
        assert actual.dtype == np.dtype(dtype), (actual.dtype, dtype)
    assert actual.shape == expected.shape, f"{err_msg} shape {actual.shape} != {expected.shape}"
    if actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected.astype(actual.dtype), err_msg=err_msg)
        return
    tol = dict(TOLS.get(actual.dtype, TOLS[np.dtype(np.float32)]))
    if rtol is not None:
        tol["rtol"] = rtol
    if atol is not None:
        tol["atol"] = atol
    np.testing.assert_allclose(
        actual.astype(np.float64),
        np.asarray(expected, dtype=np.float64),
        equal_nan=True,
        err_msg=err_msg,
        **tol,
    )
