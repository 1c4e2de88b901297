"""Matrix-vector products: rows jammed JAM at a time into one multi-accumulator LaneReduce
(with a tail loop for the rest), and the flat index of a reshaped vector free of divisions."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import randn, runtime

from catenc.driver import plan_file
from catenc.lower.loops import LaneReduce, iter_stmts
from catenc.passes.pipelines import ROW_JAM as JAM
from catenc.plan import Options
from catenc.symbolic import merge_divmod, sym

SOURCE = """
[composite.gemv]
inputs = ["x: f32[1, K]", "w: f32[N, K]", "b: f32[N]"]
outputs = ["y: f32[1, N]"]
body = "y = x @ w.T + b"

[composite.gemv_reshaped]
inputs = ["a: f64[H, 8]", "w: f64[N, H * 8]"]
outputs = ["y: f64[N]"]
body = '''
flat = reshape(a, [H * 8])
y[n] = sum[k](flat[k] * w[n, k])
'''

[composite.rows_i32]
inputs = ["x: i32[N, K]"]
outputs = ["s: i32[N]"]
body = "s = sum(x, axis=-1)"
"""


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(SOURCE)


def test_rows_are_jammed(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(SOURCE)
    entries = plan_file(str(path), Options(runtime(), opt="2")).entries
    for entry in entries:
        reduces = [s for k in entry.kernels for s in iter_stmts(k.body) if isinstance(s, LaneReduce)]
        assert any(len(r.reductions) == JAM for r in reduces), entry.name


@pytest.mark.parametrize("n", [1, JAM - 1, JAM, JAM + 1, 2 * JAM + 1, 37, 1000])
@pytest.mark.parametrize("k", [1, 63, 64, 65, 768])
def test_gemv_every_row(lib, n, k):
    x, w, b = randn((1, k), seed=1), randn((n, k), seed=2), randn((n,), seed=3)
    want = x.astype(np.float64) @ w.T.astype(np.float64) + b
    np.testing.assert_allclose(lib.gemv(x, w, b), want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("n, h", [(1, 1), (5, 3), (9, 12)])
def test_reshaped_vector(lib, n, h):
    a, w = randn((h, 8), np.float64, seed=4), randn((n, h * 8), np.float64, seed=5)
    np.testing.assert_allclose(lib.gemv_reshaped(a, w), w @ a.reshape(-1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_integer_rows_wrap(lib, n):
    x = np.random.default_rng(n).integers(-(2**31), 2**31, (n, 100), dtype=np.int64).astype(np.int32)
    np.testing.assert_array_equal(lib.rows_i32(x), x.sum(axis=-1, dtype=np.int32))


def test_merge_divmod():
    r = sym("r")
    assert merge_divmod((r // 64) * 64 + r % 64) == r
    assert merge_divmod(3 * ((r + 5) // 8) * 8 + 3 * ((r + 5) % 8) + 7) == 3 * r + 22
    kept = (r // 64) * 32 + r % 64  # not a whole quotient: unchanged
    assert merge_divmod(kept) == kept
    for value in range(-70, 140):
        assert merge_divmod((r // 8) * 8 + r % 8).evaluate({"r": value}) == value
