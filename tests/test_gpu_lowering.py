"""The GPU lowering: which mapping each kernel gets, and that every mapping computes numpy's
answer when run (OpenCL on PoCL) at edge sizes and at every work-group size.

- element: one work-item per point (elementwise, reductions along a non-contiguous axis,
  argmax whose best-so-far a group cannot share);
- row: a work-group per row, its loops shared and reduced across the group (softmax, layernorm);
- gemm: local-memory tiles (matmul, batched, fused epilogue, conv as implicit gemm).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import compile_text, randn, runtime

from catenc.driver import plan_file
from catenc.lower.gpu import BlockReduce, FirstItem, ThreadLoop, TiledGemm, format_gpu
from catenc.plan import Options

SOURCE = """
[composite.scale_add]
inputs = ["x: f32[M, N]", "y: f32[N]"]
outputs = ["z: f32[M, N]"]
body = "z = x * 2.0 + y"

[composite.softmax]
inputs = ["x: f32[M, N]"]
outputs = ["y: f32[M, N]"]
body = '''
e = exp(x - max(x, axis=-1, keepdims=True))
y = e / sum(e, axis=-1, keepdims=True)
'''

[composite.layernorm]
inputs = ["x: f32[M, N]", "g: f32[N]"]
outputs = ["y: f32[M, N]"]
body = '''
mu = mean(x, axis=-1, keepdims=True)
var = mean((x - mu) * (x - mu), axis=-1, keepdims=True)
y = (x - mu) / sqrt(var + 1e-5) * g
'''

[composite.column_sum]
inputs = ["x: f32[M, N]"]
outputs = ["s: f32[N]"]
body = "s = sum(x, axis=0)"

[composite.total]
inputs = ["x: f64[M, N]"]
outputs = ["s: f64"]
body = "s = sum(x)"

[composite.row_argmax]
inputs = ["x: f32[M, N]"]
outputs = ["k: i64[M]"]
body = "k = argmax(x, axis=-1)"

[composite.int_rows]
inputs = ["x: i32[M, N]"]
outputs = ["s: i32[M]", "hi: i32[M]", "lo: i32[M]"]
body = '''
s = sum(x, axis=-1)
hi = max(x, axis=-1)
lo = min(x, axis=-1)
'''

[composite.mm_bias_relu]
inputs = ["a: f32[M, K]", "b: f32[K, N]", "c: f32[N]"]
outputs = ["y: f32[M, N]"]
body = "y = relu(a @ b + c)"

[composite.bmm_t]
inputs = ["a: f64[B, M, K]", "b: f64[B, N, K]"]
outputs = ["y: f64[B, M, N]"]
body = "y[i, m, n] = sum[k](a[i, m, k] * b[i, n, k])"
"""

MAPPINGS = {
    "scale_add": "element",
    "softmax": "row",
    "layernorm": "row",
    "column_sum": "element",
    "total": "row",
    "row_argmax": "element",
    "int_rows": "row",
    "mm_bias_relu": "gemm",
    "bmm_t": "gemm",
}


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpu") / "kernels.toml"
    path.write_text(SOURCE)
    return plan_file(str(path), Options(runtime("opencl"), config={"BLOCK": "64"}))


@pytest.mark.parametrize("name", sorted(MAPPINGS))
def test_mapping(plan, name):
    entry = next(e for e in plan.entries if e.name == name)
    assert {k.mapping for k in entry.gpu} == {MAPPINGS[name]}


def test_row_kernels_share_loops_and_reduce_across_the_group(plan):
    softmax = next(e for e in plan.entries if e.name == "softmax").gpu[0]
    kinds = [type(s) for s in softmax.body]
    assert kinds.count(ThreadLoop) == 3 and kinds.count(BlockReduce) == 2
    assert [s.op for s in softmax.body if isinstance(s, BlockReduce)] == ["max", "add"]
    total = next(e for e in plan.entries if e.name == "total").gpu[0]
    assert total.points == () and any(isinstance(s, FirstItem) for s in total.body)


def test_gemm_kernel_is_tiled_with_its_epilogue(plan):
    (kernel,) = next(e for e in plan.entries if e.name == "mm_bias_relu").gpu
    (stmt,) = kernel.body
    assert isinstance(stmt, TiledGemm) and stmt.contraction.epilogue is not None
    assert kernel.groups.evaluate({"M": 65, "N": 64, "K": 3}) == 2  # two 64x64 tiles
    text = format_gpu((kernel,))
    assert "64x64 tiles" in text and "epilogue" in text and "grid" in text


def _reference(name, args):
    x = args[0]
    if name == "scale_add":
        return [x * np.float32(2) + args[1]]
    if name == "softmax":
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return [e / e.sum(axis=-1, keepdims=True)]
    if name == "layernorm":
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return [(x - mu) / np.sqrt(var + np.float32(1e-5)) * args[1]]
    if name == "column_sum":
        return [x.sum(axis=0)]
    if name == "total":
        return [np.array(x.sum())]
    if name == "row_argmax":
        return [x.argmax(axis=-1)]
    if name == "int_rows":
        return [x.sum(axis=-1, dtype=np.int32), x.max(axis=-1), x.min(axis=-1)]
    if name == "mm_bias_relu":
        return [np.maximum(x.astype(np.float64) @ args[1] + args[2], 0)]
    return [np.einsum("imk,ink->imn", x, args[1])]


def _inputs(name, m, n, rng):
    if name == "int_rows":
        return [rng.integers(-1000, 1000, (m, n), dtype=np.int32)]
    if name == "total":
        return [rng.standard_normal((m, n))]
    if name in ("scale_add", "layernorm"):
        return [randn((m, n), seed=1), randn((n,), seed=2)]
    if name == "mm_bias_relu":
        k = m + 3
        return [randn((m, k), seed=1), randn((k, n), seed=2), randn((n,), seed=3)]
    if name == "bmm_t":
        return [rng.standard_normal((3, m, n + 1)), rng.standard_normal((3, n, n + 1))]
    return [randn((m, n), seed=1)]


@pytest.mark.parametrize("block", ["64", "256"])
def test_every_mapping_matches_numpy(tmp_path_factory, block):
    lib = compile_text(tmp_path_factory.mktemp("ocl"), SOURCE, runtime_name="opencl", config={"BLOCK": block})
    rng = np.random.default_rng(0)
    for name in MAPPINGS:
        for m, n in [(1, 1), (1, 7), (3, 65), (70, 129), (130, 5)]:
            args = _inputs(name, m, n, rng)
            got = lib[name](*args)
            got = list(got) if isinstance(got, tuple) else [got]
            for g, want in zip(got, _reference(name, args)):
                if np.issubdtype(want.dtype, np.integer):
                    np.testing.assert_array_equal(g, want, err_msg=f"{name} {m}x{n}")
                else:
                    tol = 1e-12 if g.dtype == np.float64 else 2e-5
                    np.testing.assert_allclose(g, want, rtol=tol, atol=tol, err_msg=f"{name} {m}x{n}")


GUARDED = """
[composite.guarded_rows]
inputs = ["x: i32[N, K]", "w: i32[2]"]
outputs = ["y: i32[N - 1, K]"]
where = ["N >= 1"]
body = "y[i, j] = where(j <= i + 1, min[r](x[i + r, j] * w[r]), 0)"
"""


def test_a_reduction_under_a_guard_is_combined_across_the_group(tmp_path):
    """The row's loop sits under the `where` guard (an `if`); its group reduction must follow
    it there (found by the differential fuzzer: only work-item 0's part was kept)."""
    lib = compile_text(tmp_path, GUARDED, runtime_name="opencl")
    rng = np.random.default_rng(0)
    for n, k in [(1, 4), (3, 3), (9, 70)]:
        x, w = rng.integers(-50, 50, (n, k), dtype=np.int32), np.array([3, -2], np.int32)
        i, j = np.indices((n - 1, k))
        want = np.where(j <= i + 1, np.minimum(x[:-1] * w[0], x[1:] * w[1]), 0)
        np.testing.assert_array_equal(lib.guarded_rows(x, w), want)
