"""Tests of catenc.loader against a hand-written C library and manifest."""

from __future__ import annotations

import gc
import hashlib
import json
import pickle
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from catenc.dtypes import DTYPES, bf16_to_f32, f32_to_bf16
from catenc.loader import (
    CatencStatusError,
    Entry,
    Library,
    ManifestError,
    ShapeError,
    ShapeExpr,
    UnsupportedRuntimeError,
    aligned_buffer,
    load,
)

C_SOURCE = r"""
#include <stdint.h>
#include <stddef.h>
#include <string.h>

static float bf16_to_float(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    float f;
    if (exp == 0) {
        f = (float)mant * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    u = sign | (exp == 31 ? 0x7f800000u : (exp + 112) << 23) | (mant << 13);
    memcpy(&f, &u, 4);
    return f;
}

/* z = alpha*x + y + b[0::2] - b[1::2]; total = sum(z); b: bf16[H], H = 2*N */
int scale_add(const float* x, const float* y, float alpha, const uint16_t* b,
              float* z, double* total, int64_t N, void* workspace, size_t workspace_bytes) {
    if (workspace_bytes < (size_t)N * 4 || (uintptr_t)workspace % 64 != 0) return 2;
    if (N > 0 && workspace == NULL) return 2;
    float* tmp = (float*)workspace;
    for (int64_t i = 0; i < N; i++) tmp[i] = alpha * x[i];
    double s = 0.0;
    for (int64_t i = 0; i < N; i++) {
        z[i] = tmp[i] + y[i] + bf16_to_float(b[2 * i]) - bf16_to_float(b[2 * i + 1]);
        s += z[i];
    }
    *total = s;
    return 0;
}
size_t scale_add_workspace_bytes(int64_t N) { return (size_t)N * 4; }

/* out[k, :] = table[idx[k], :]; table: f32[V, D] with D = 3; where V % 2 == 0 */
int take_rows(const float* table, const int64_t* idx, float* out, int64_t V, int64_t K,
              void* workspace, size_t workspace_bytes) {
    if (V % 2 != 0) return 1;
    for (int64_t k = 0; k < K; k++)
        if (idx[k] < 0 || idx[k] >= V) return 3;
    for (int64_t k = 0; k < K; k++)
        for (int d = 0; d < 3; d++) out[k * 3 + d] = table[idx[k] * 3 + d];
    return 0;
}
size_t take_rows_workspace_bytes(int64_t V, int64_t K) { return 0; }

/* out[i] = start + i*step (step is f16 bits by value); null = workspace was NULL */
int iota(double start, uint16_t step, float* out, uint8_t* null, int64_t N,
         void* workspace, size_t workspace_bytes) {
    float s = f16_to_float(step);
    for (int64_t i = 0; i < N; i++) out[i] = (float)(start + (double)i * s);
    *null = workspace == NULL;
    return 0;
}
size_t iota_workspace_bytes(int64_t N) { return 0; }

/* p: f32[2*M + 1]; s[i] = p[2i] + p[2i+1] + p[2M]; head = s[:min(M, 2)]; flag: i8 by value */
int pairsum(const float* p, int8_t flag, float* s, float* head, int64_t M,
            void* workspace, size_t workspace_bytes) {
    for (int64_t i = 0; i < M; i++) s[i] = p[2 * i] + p[2 * i + 1] + p[2 * M] + flag;
    for (int64_t i = 0; i < M && i < 2; i++) head[i] = s[i];
    return 0;
}
"""


def _ws() -> list[dict]:
    return [
        {"name": "workspace", "role": "workspace"},
        {"name": "workspace_bytes", "role": "workspace_bytes"},
    ]


def _dim(name: str) -> dict:
    return {"name": name, "role": "dim", "ctype": "int64_t"}


def _tensor(name: str, role: str, dtype: str, shape: list) -> dict:
    return {"name": name, "role": role, "dtype": dtype, "shape": shape}


ENTRIES = [
    {
        "name": "scale_add",
        "symbol": "scale_add",
        "workspace_symbol": "scale_add_workspace_bytes",
        "args": [
            _tensor("x", "input", "f32", ["N"]),
            _tensor("y", "input", "f32", ["N"]),
            _tensor("alpha", "input", "f32", []),
            _tensor("b", "input", "bf16", ["H"]),
            _tensor("z", "output", "f32", ["N"]),
            _tensor("total", "output", "f64", []),
            _dim("N"),
            *_ws(),
        ],
        "constraints": [],
        "derived": {"H": "2*N"},
        "specialized": {},
        "workspace_bytes": "4*N",
    },
    {
        "name": "take_rows",
        "symbol": "take_rows",
        "workspace_symbol": "take_rows_workspace_bytes",
        "args": [
            _tensor("table", "input", "f32", ["V", "D"]),
            _tensor("idx", "input", "i64", ["K"]),
            _tensor("out", "output", "f32", ["K", "D"]),
            _dim("V"),
            _dim("K"),
            *_ws(),
        ],
        "constraints": ["V % 2 == 0"],
        "derived": {},
        "specialized": {"D": 3},
        "workspace_bytes": "0",
    },
    {
        "name": "iota",
        "symbol": "iota",
        "workspace_symbol": "iota_workspace_bytes",
        "args": [
            _tensor("start", "input", "f64", []),
            _tensor("step", "input", "f16", []),
            _tensor("out", "output", "f32", ["N"]),
            _tensor("null", "output", "bool", []),
            _dim("N"),
            *_ws(),
        ],
        "workspace_bytes": "0",
    },
    {
        # no size function: the loader falls back to the manifest's expression
        "name": "pairsum",
        "symbol": "pairsum",
        "args": [
            _tensor("p", "input", "f32", ["2*M + 1"]),
            _tensor("flag", "input", "i8", []),
            _tensor("s", "output", "f32", ["M"]),
            _tensor("head", "output", "f32", ["min(M, 2)"]),
            _dim("M"),
            *_ws(),
        ],
        "workspace_bytes": "0",
    },
]


def write_manifest(directory: Path, library: Path, entries: list[dict], **overrides) -> Path:
    """A manifest for library (copied into directory) with entries; returns its path."""
    target = directory / library.name
    if not target.exists():
        shutil.copy(library, target)
    manifest = {
        "schema": "catenc.manifest/1",
        "catenc_version": "0.1.0",
        "runtime": {"name": "gcc", "language": "c", "config": {}},
        "inputs": [],
        "files": [
            {"path": "model.c", "role": "source", "sha256": "0" * 64},
            {
                "path": library.name,
                "role": "shared_library",
                "sha256": hashlib.sha256(target.read_bytes()).hexdigest(),
            },
        ],
        "build": {"commands": []},
        "entries": entries,
    }
    manifest.update(overrides)
    path = directory / "model.manifest.json"
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled test library."""
    directory = tmp_path_factory.mktemp("build")
    source = directory / "model.c"
    source.write_text(C_SOURCE)
    library = directory / "libmodel.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O1", "-Wall", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
    )
    return library


@pytest.fixture(scope="module")
def lib(built: Path) -> Library:
    return load(write_manifest(built.parent, built, ENTRIES))


def scale_add_reference(x, y, alpha, b_bits):
    x = np.asarray(x, np.float32)
    y = np.asarray(y, np.float32)
    b = bf16_to_f32(b_bits)
    z = np.float32(alpha) * x + y + b[0::2] - b[1::2]
    return z, z.astype(np.float64).sum()


def random_inputs(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    b = f32_to_bf16(rng.standard_normal(2 * n).astype(np.float32))
    return x, y, b


# ------------------------------------------------------------------- expressions


@pytest.mark.parametrize(
    ("source", "env", "expected"),
    [
        ("(N + 3) // 4 * 4", {"N": 5}, 8),
        ("max(a, b) - min(a, b)", {"a": 3, "b": 10}, 7),
        ("-7 // 2", {}, -4),
        ("-7 % 3", {}, 2),
        ("max(1, N, 2*N)", {"N": 4}, 8),
        ("+N - -1", {"N": 4}, 5),
        (12, {}, 12),
    ],
)
def test_shape_expr_evaluates_like_python(source, env, expected):
    assert ShapeExpr(source)(env) == expected


@pytest.mark.parametrize(
    "source",
    [
        "2 ** 3",
        "N / 2",
        "a.b",
        "x[0]",
        "1.5",
        "True",
        "'s'",
        "abs(N)",
        "max(N)",
        "max(N, b=1)",
        "__import__('os').system('true')",
        "lambda: 0",
        "N if N else 1",
        "N == 1",
        "N +",
    ],
)
def test_shape_expr_rejects_everything_else(source):
    with pytest.raises(ManifestError, match="expression"):
        ShapeExpr(source)


def test_shape_expr_names_symbol_and_constraints():
    expr = ShapeExpr("max(M, 2) * K")
    assert expr.names == {"M", "K"}
    assert expr.symbol is None
    assert ShapeExpr(" N ").symbol == "N"
    assert ShapeExpr("K % 16 == 0", comparisons=True)({"K": 32}) == 1
    assert ShapeExpr("0 < N <= 4", comparisons=True)({"N": 5}) == 0
    with pytest.raises(KeyError):
        ShapeExpr("N + 1")({})


# ------------------------------------------------------------------------ library


def test_library_exposes_entries(lib: Library, built: Path):
    assert lib.path == built.resolve()
    assert list(lib.entries) == ["scale_add", "take_rows", "iota", "pairsum"]
    assert lib["scale_add"] is lib.scale_add is lib.entries["scale_add"]
    assert "iota" in lib and len(lib) == 4 and list(lib) == list(lib.entries)
    assert lib.manifest["schema"] == "catenc.manifest/1"
    with pytest.raises(KeyError, match="nope"):
        lib["nope"]
    with pytest.raises(AttributeError, match="nope"):
        lib.nope  # noqa: B018


def test_entry_describes_its_arguments(lib: Library):
    entry: Entry = lib.scale_add
    assert [a.name for a in entry.inputs] == ["x", "y", "alpha", "b"]
    assert [a.name for a in entry.outputs] == ["z", "total"]
    assert entry.dims == ["N"]
    assert entry.inputs[3].dtype is DTYPES["bf16"] and entry.inputs[3].shape == ("H",)
    assert entry.inputs[2].shape == () and entry.inputs[2].rank == 0
    assert entry.signature == ("scale_add(x: f32[N], y: f32[N], alpha: f32, b: bf16[H]) -> (z: f32[N], total: f64)")
    assert lib.take_rows.specialized == {"D": 3}
    assert "take_rows" in repr(lib)


def test_load_accepts_the_directory(lib: Library, built: Path):
    assert list(load(built.parent).entries) == list(lib.entries)


def test_entry_keeps_the_library_loaded(built: Path):
    entry = load(built.parent).scale_add
    gc.collect()
    x, y, b = random_inputs(5)
    z, _ = entry(x, y, 1.0, b)
    np.testing.assert_allclose(z, scale_add_reference(x, y, 1.0, b)[0], rtol=1e-6)


# -------------------------------------------------------------------------- calls


@pytest.mark.parametrize("n", [0, 1, 7, 64, 1000])
def test_scale_add_matches_numpy(lib: Library, n: int):
    x, y, b = random_inputs(n, seed=n)
    z, total = lib.scale_add(x, y, 0.75, b)
    expected_z, expected_total = scale_add_reference(x, y, 0.75, b)
    assert z.dtype == np.float32 and z.shape == (n,)
    np.testing.assert_allclose(z, expected_z, rtol=1e-6, atol=1e-6)
    assert total.shape == () and total.dtype == np.float64
    np.testing.assert_allclose(total, expected_total, rtol=1e-6, atol=1e-6)


def test_inputs_are_converted_to_storage(lib: Library):
    x, y, b = random_inputs(9, seed=3)
    z_ref, _ = lib.scale_add(x, y, 2.0, b)
    b_floats = bf16_to_f32(b)  # exact bf16 values: rounding them gives the same bits
    z, _ = lib.scale_add(x.astype(np.float64).tolist(), y[::-1][::-1].copy(), 2, b_floats)
    np.testing.assert_array_equal(z, z_ref)
    strided = np.repeat(x, 2)[::2]  # not contiguous
    z, _ = lib.scale_add(strided, y, np.float32(2.0), b)
    np.testing.assert_array_equal(z, z_ref)
    z, _ = lib.scale_add(x, y, np.array(2.0), b.astype(np.uint16))
    np.testing.assert_array_equal(z, z_ref)


def test_bf16_float_inputs_are_rounded(lib: Library):
    x = np.zeros(1, np.float32)
    z, _ = lib.scale_add(x, x, 0.0, np.array([1.0 + 2.0**-9, 0.0], dtype=np.float32))
    assert z[0] == np.float32(1.0)  # 1 + 2^-9 is a tie: rounded to even, 1.0
    z, _ = lib.scale_add(x, x, 0.0, np.array([1.0 + 3 * 2.0**-9, 0.0]))
    assert z[0] == np.float32(1.0 + 2.0**-7)


def test_rank0_inputs_and_outputs(lib: Library):
    out, null = lib.iota(1.5, 0.25, N=6)
    np.testing.assert_array_equal(out, 1.5 + 0.25 * np.arange(6, dtype=np.float32))
    assert null.shape == () and null.dtype == np.bool_ and bool(null)  # size 0 -> NULL
    bits = np.float16(-0.5).view(np.uint16)
    out, _ = lib.iota(np.array(2.0), bits, N=3)  # uint16 given for f16: taken as bits
    np.testing.assert_array_equal(out, [2.0, 1.5, 1.0])
    with pytest.raises(ShapeError, match="rank 0"):
        lib.iota([1.0], 0.25, N=2)


def test_symbol_only_in_outputs_needs_a_keyword(lib: Library):
    with pytest.raises(TypeError, match=r"cannot infer N.*N=\.\.\."):
        lib.iota(0.0, 1.0)
    assert lib.iota.bind(0.0, 1.0, N=4) == {"N": 4}


def test_bind_infers_free_derived_and_specialized(lib: Library):
    x, y, b = random_inputs(5)
    assert lib.scale_add.bind(x, y, 1.0, b) == {"N": 5, "H": 10}
    assert lib.scale_add.bind(x, y, 1.0, b, N=5, H=10) == {"N": 5, "H": 10}
    table, idx = np.zeros((4, 3), np.float32), np.zeros(7, np.int64)
    assert lib.take_rows.bind(table, idx) == {"V": 4, "K": 7, "D": 3}


def test_bind_solves_affine_shape_entries(lib: Library):
    p = np.arange(7, dtype=np.float32)
    assert lib.pairsum.bind(p, 0) == {"M": 3}
    s, head = lib.pairsum(p, 1)
    expected = p[0:6:2] + p[1:6:2] + p[6] + 1
    np.testing.assert_array_equal(s, expected)
    np.testing.assert_array_equal(head, expected[:2])
    s, head = lib.pairsum(np.ones(1, np.float32), 0)
    assert s.shape == (0,) and head.shape == (0,)
    with pytest.raises(ShapeError, match=r"'p' axis 0: no value of M makes 2\*M \+ 1 equal 6"):
        lib.pairsum(np.ones(6, np.float32), 0)


def test_shape_mismatch_names_argument_axis_and_sizes(lib: Library):
    x, y, b = random_inputs(5)
    with pytest.raises(ShapeError, match=r"input 'y' axis 0: expected 5 .*got 4"):
        lib.scale_add(x, y[:4], 1.0, b)
    with pytest.raises(ShapeError, match=r"input 'b' axis 0: expected 10 \(H with H=10\).*got 9"):
        lib.scale_add(x, y, 1.0, b[:9])
    with pytest.raises(ShapeError, match=r"input 'x' must have rank 1"):
        lib.scale_add(x.reshape(1, 5), y, 1.0, b)
    table = np.zeros((4, 2), np.float32)
    with pytest.raises(ShapeError, match=r"input 'table' axis 1: expected 3 \(D with D=3\)"):
        lib.take_rows(table, np.zeros(1, np.int64))


def test_given_dims_win_and_are_checked(lib: Library):
    x, y, b = random_inputs(5)
    with pytest.raises(ShapeError, match=r"input 'x' axis 0: expected 6 .*got 5"):
        lib.scale_add.bind(x, y, 1.0, b, N=6)
    with pytest.raises(ShapeError, match="H=12 was given but H = 2\\*N = 10"):
        lib.scale_add.bind(x, y, 1.0, b, H=12)
    with pytest.raises(TypeError, match="unexpected keyword argument 'Q'"):
        lib.scale_add(x, y, 1.0, b, Q=1)
    with pytest.raises(ValueError, match="non-negative"):
        lib.iota(0.0, 1.0, N=-1)
    with pytest.raises(TypeError, match="must be an int"):
        lib.iota(0.0, 1.0, N=2.5)


def test_wrong_number_of_inputs(lib: Library):
    x, y, _ = random_inputs(5)
    with pytest.raises(TypeError, match=r"takes 4 inputs \(x, y, alpha, b\), got 3"):
        lib.scale_add(x, y, 1.0)


def test_out_arrays_are_used_and_checked(lib: Library):
    x, y, b = random_inputs(8, seed=5)
    z, total = np.empty(8, np.float32), np.empty((), np.float64)
    result = lib.scale_add(x, y, 3.0, b, out=(z, total))
    assert result[0] is z and result[1] is total
    expected_z, expected_total = scale_add_reference(x, y, 3.0, b)
    np.testing.assert_allclose(z, expected_z, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(total, expected_total, rtol=1e-6, atol=1e-6)
    with pytest.raises(ShapeError, match=r"output 'z': expected shape \(8,\), got \(7,\)"):
        lib.scale_add(x, y, 3.0, b, out=(z[:7], total))
    with pytest.raises(TypeError, match="dtype float32"):
        lib.scale_add(x, y, 3.0, b, out=(z.astype(np.float64), total))
    with pytest.raises(ValueError, match="C-contiguous"):
        lib.scale_add(x, y, 3.0, b, out=(np.empty(16, np.float32)[::2], total))
    with pytest.raises(TypeError, match="2 arrays"):
        lib.scale_add(x, y, 3.0, b, out=z)
    with pytest.raises(ValueError, match="overlaps"):
        lib.scale_add(x, y, 3.0, b, out=(x, total))


def test_inputs_must_keep_the_kind_of_their_values(lib: Library):
    """bool < integer < float: an array converts to an input of its own kind or a higher one;
    a float array for an integer input or a complex one for a real input is a TypeError."""
    x, y, b = random_inputs(4, seed=7)
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    with pytest.raises(TypeError, match=r"take_rows: input 'idx' is i64: a float64 array"):
        lib.take_rows(table, np.array([1.7, 0.0]))
    with pytest.raises(TypeError, match=r"input 'x' is f32: a complex64 array"):
        lib.scale_add(x + 1j, y, 1.0, b)
    with pytest.raises(TypeError, match=r"input 'alpha' is f32: a complex128 array"):
        lib.scale_add(x, y, 1.0 + 2.0j, b)
    with pytest.raises(TypeError, match=r"input 'start' is f64: a <U3 array"):
        lib.iota("1.5", 0.25, N=2)
    with pytest.raises(TypeError, match=r"input 'flag' is i8: a float64 array"):
        lib.pairsum(np.ones(3, np.float32), 1.0)
    with pytest.raises(TypeError, match=r"input 'idx' is i64: a object array"):
        lib.take_rows(table, [2**64, 0])
    # widening kinds, and integers of any width or sign, are accepted
    np.testing.assert_array_equal(lib.take_rows(table, np.array([3, 1], np.uint8)), table[[3, 1]])
    np.testing.assert_array_equal(lib.take_rows(table, np.array([True, False])), table[[1, 0]])
    z, _ = lib.scale_add(np.arange(4), np.arange(4, dtype=np.int16), 2, b)
    np.testing.assert_array_equal(z, scale_add_reference(np.arange(4), np.arange(4), 2.0, b)[0])
    s, _ = lib.pairsum(np.ones(3, np.float32), np.uint64(1))
    np.testing.assert_array_equal(s, [4.0])


def test_status_errors(lib: Library):
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([3, 0, 3], np.int64)
    np.testing.assert_array_equal(lib.take_rows(table, idx), table[idx])
    with pytest.raises(CatencStatusError, match="CATENC_E_INDEX") as info:
        lib.take_rows(table, np.array([4], np.int64))
    assert info.value.status == 3 and info.value.name == "take_rows"
    with pytest.raises(CatencStatusError, match=r"CATENC_E_SHAPE.*V % 2 == 0.*V=3") as info:
        lib.take_rows(table[:3], idx[:0])
    assert info.value.status == 1 and info.value.code == "CATENC_E_SHAPE"


def test_status_error_pickles():
    error = pickle.loads(pickle.dumps(CatencStatusError(2, "f")))
    assert (error.status, error.name) == (2, "f")
    assert "CATENC_E_WORKSPACE" in str(error)
    assert isinstance(error, RuntimeError)


# ---------------------------------------------------------------------- workspace


def test_workspace_bytes(lib: Library):
    assert lib.scale_add.workspace_bytes(N=10) == 40
    assert lib.scale_add.workspace_bytes(N=0) == 0
    assert lib.take_rows.workspace_bytes(V=2, K=9) == 0
    assert lib.pairsum.workspace_bytes(M=3) == 0  # from the manifest's expression
    with pytest.raises(TypeError, match="cannot infer N"):
        lib.scale_add.workspace_bytes()


def test_aligned_buffer():
    assert aligned_buffer(0).nbytes == 0
    for size in (1, 40, 1000):
        buffer = aligned_buffer(size)
        assert buffer.nbytes == size and buffer.ctypes.data % 64 == 0
        assert aligned_buffer(size, alignment=256).ctypes.data % 256 == 0


def test_call_raw_reports_workspace_status(lib: Library):
    n = 10
    x, y, b = random_inputs(n, seed=7)
    z, total = np.empty(n, np.float32), np.empty((), np.float64)
    big = aligned_buffer(128)

    def call(workspace, nbytes):
        return lib.scale_add.call_raw(x, y, 0.5, b, z, total, n, workspace, nbytes)

    assert call(aligned_buffer(39), 39) == 2  # too small
    assert call(big[1:41], 40) == 2  # not 64-byte aligned
    assert call(None, 0) == 2  # NULL with N > 0
    assert call(big[:40], 40) == 0
    expected_z, expected_total = scale_add_reference(x, y, 0.5, b)
    np.testing.assert_allclose(z, expected_z, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(total, expected_total, rtol=1e-6, atol=1e-6)
    empty = np.empty(0, np.float32)
    assert lib.scale_add.call_raw(empty, empty, 1.0, b[:0], empty, total, 0, None, 0) == 0
    assert total == 0.0
    with pytest.raises(TypeError, match="takes 9 arguments"):
        lib.scale_add.call_raw(x, y)


def test_concurrent_calls(lib: Library):
    def work(seed: int) -> bool:
        n = 1 + seed % 97
        x, y, b = random_inputs(n, seed=seed)
        z, total = lib.scale_add(x, y, 1.25, b)
        expected_z, expected_total = scale_add_reference(x, y, 1.25, b)
        return np.allclose(z, expected_z, rtol=1e-6, atol=1e-6) and np.isclose(
            total, expected_total, rtol=1e-6, atol=1e-6
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(work, range(400)))


# ----------------------------------------------------------------------- manifests


def test_a_cuda_build_needs_a_gpu_and_other_languages_are_refused(tmp_path: Path, built: Path):
    runtime = {"name": "cuda", "language": "cuda", "config": {}}
    path = write_manifest(tmp_path, built, ENTRIES, runtime=runtime)
    with pytest.raises(UnsupportedRuntimeError, match="needs (libcudart|a GPU)"):  # this machine has none
        load(path)
    runtime = {"name": "metal", "language": "metal", "config": {}}
    path = write_manifest(tmp_path, built, ENTRIES, runtime=runtime)
    with pytest.raises(UnsupportedRuntimeError, match="cannot run builds of language 'metal'"):
        load(path)


def test_the_calling_convention_says_which_arguments_follow_the_workspace(tmp_path: Path, built: Path):
    entry = json.loads(json.dumps(ENTRIES[0]))
    entry["args"].append({"name": "stream", "role": "stream"})
    runtime = {"name": "gcc", "language": "c", "config": {}, "calling_convention": "cuda"}
    library = load(write_manifest(tmp_path, built, [entry], runtime=runtime))
    with pytest.raises(TypeError, match="takes 10 arguments"):  # 7 of the entry, workspace, its size, stream
        library["scale_add"].call_raw()
    runtime["calling_convention"] = "fortran"
    with pytest.raises(ManifestError, match="unknown calling_convention 'fortran'"):
        load(write_manifest(tmp_path, built, ENTRIES, runtime=runtime))


def test_sha256_mismatch(tmp_path: Path, built: Path):
    path = write_manifest(tmp_path, built, ENTRIES)
    manifest = json.loads(path.read_text())
    manifest["files"][1]["sha256"] = "0" * 64
    path.write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="verify=False"):
        load(path)
    assert "iota" in load(path, verify=False)


def test_unsafe_expression_is_refused_at_load(tmp_path: Path, built: Path):
    entry = json.loads(json.dumps(ENTRIES[0]))
    entry["derived"] = {"H": "__import__('os').system('touch pwned') or 2*N"}
    with pytest.raises(ManifestError, match="not allowed"):
        load(write_manifest(tmp_path, built, [entry]))
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e["args"][0].update(shape=["Q"]), "unknown symbols \\['Q'\\]"),
        (lambda e: e["args"][0].update(dtype="f128"), "unknown dtype 'f128'"),
        (lambda e: e["args"].append({"name": "s", "role": "stream"}), "role 'stream'"),
        (lambda e: e.update(symbol="missing_fn"), "no symbol 'missing_fn'"),
        (lambda e: e.update(derived={"H": "2*G", "G": "H"}), "depends on itself"),
        (lambda e: e["args"][0].pop("shape"), "missing key 'shape'"),
    ],
)
def test_malformed_manifests(tmp_path: Path, built: Path, change, message):
    entry = json.loads(json.dumps(ENTRIES[0]))
    change(entry)
    with pytest.raises(ManifestError, match=message):
        load(write_manifest(tmp_path, built, [entry]))


def test_missing_shared_library(tmp_path: Path, built: Path):
    path = write_manifest(tmp_path, built, ENTRIES)
    (tmp_path / built.name).unlink()
    with pytest.raises(ManifestError, match="does not exist"):
        load(path)


def test_an_integer_array_for_a_bool_input_is_refused(compile_composites):
    text = '[composite.pick]\ninputs = ["m: bool[N]", "x: f32[N]"]\noutputs = ["y: f32[N]"]\n'
    pick = compile_composites(text + 'body = "y = where(m, x, 0.0)"\n')["pick"]
    x = np.array([1.5, 2.5], np.float32)
    with pytest.raises(TypeError, match=r"pick: input 'm' is bool: a int64 array"):
        pick(np.array([0, 2]), x)
    np.testing.assert_array_equal(pick(np.array([True, False]), x), [1.5, 0.0])
