"""Regressions found by the differential fuzzer (tests/fuzzing, `make fuzz`), minimised by hand.

One test per bug, named for what it exercises, comparing with numpy computed here. Each
docstring gives the program the fuzzer found it with, what catenc did and what numpy says.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, compile_text, rng

from catenc.build import BuildRequest, build
from catenc.driver import plan_file
from catenc.loader import load
from catenc.plan import Options
from catenc.runtime.descriptor import load_runtime
from catenc.testing.check import check_entries
from catenc.testing.reference import run_program

EXACT = dict(rtol=0, atol=0)


def randn(shape, dtype=np.float32, seed=0):
    return rng(seed).standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------------------------------
# An index used as a value (`0 - i`, `x[j] * j`, a guard `i - j >= 1`) in an index-form
# intermediate that -O2 inlines into a consumer reading it at a shifted or reversed position
# (`t[j - 2]`, `t[M - 1 - j]`): the substituted index expression was rendered without
# parentheses, so `0 - i` at i = j - 2 became `0 - j - 2` and `x[j] * j` at j = M - 1 - j
# became `x[..] * M - j - 1`. -O0 (no fusion) was right.

INLINED_INDEX_VALUES = '''
[composite.index_sub_shifted]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = """
t[i] = x[i] + cast(0 - i, f32)
y[j] = where(j >= 2, t[j - 2], 0.0)
"""

[composite.index_mul_reversed]
inputs = ["x: i64[M]"]
outputs = ["y: i64[M]"]
body = """
t[j] = x[j] * j
y[j] = t[M - 1 - j]
"""

[composite.index_guard_shifted]
inputs = ["x: f32[5, N]"]
outputs = ["y: f32[5, N + 2]"]
body = """
t[i, j] = where(i - j >= 1, x[i, j], 0.0)
y[i, j] = where((j >= 2) & (j - 2 < N), t[i, j - 2], 0.0)
"""
'''


@pytest.mark.parametrize("opt", ["0", "2"])
@pytest.mark.parametrize("n", [0, 1, 3, 7, 13])
def test_index_value_of_a_fused_producer_read_at_a_shifted_index(compile_composites, opt, n):
    """Found as: t5[i, j] = where(i - j >= 1, x2[i, j], 0.0); t8[i, j] =
    reciprocal(abs(where((j >= 2) & (j - 2 < N + 2), t5[i, j - 2], 0.0)) + 1.0). At -O2 the
    C read `(1 <= i2 - i3 - 2) ? x[...] : 0` for `1 <= i2 - (i3 - 2)`: max abs err 0.68."""
    lib = compile_composites(INLINED_INDEX_VALUES, name="inlined_index_values", opt=opt)

    x = randn(n)
    t = x - np.arange(n, dtype=np.float32)
    want = np.zeros(n, np.float32)
    want[2:] = t[: max(n - 2, 0)]
    assert_close(lib["index_sub_shifted"](x), want, **EXACT)

    xi = rng(1).integers(-8, 9, n).astype(np.int64)
    assert_close(lib["index_mul_reversed"](xi), (xi * np.arange(n))[::-1], dtype=np.int64)

    x2 = randn((5, n), seed=2)
    i, j = np.meshgrid(np.arange(5), np.arange(n), indexing="ij")
    t2 = np.where(i - j >= 1, x2, np.float32(0))
    want2 = np.zeros((5, n + 2), np.float32)
    want2[:, 2:] = t2
    assert_close(lib["index_guard_shifted"](x2), want2, **EXACT)


# ------------------------------------------------------------------------------------------
# take(x, idx, axis) where the dims after `axis` multiply to a sum (x: [M, N + 1, 2] gives a
# stride 2*N + 2; a slice x[:, 1:] gives N - 1): the gathered position was multiplied by the
# stride without parentheses (`pos*2LL*N + 2LL`), reading the wrong elements at every level
# (and, for M = 1, one element past the end of x).

TAKE_STRIDES = '''
[composite.take_stride_sum]
inputs = ["x: f32[M, N + 1, 2]", "k: i64[K]"]
outputs = ["y: f32[K, N + 1, 2]"]
body = "y = take(x, k, 0)"

[composite.take_stride_difference]
inputs = ["x: f64[M, N]", "k: i32"]
outputs = ["y: f64[N - 1]"]
where = ["N >= 1"]
body = """
s = x[:, 1:]
y = take(s, k, 0)
"""

[composite.take_middle_axis]
inputs = ["x: f32[2, M, N + 2]", "k: i64[K, 2]"]
outputs = ["y: f32[2, K, 2, N + 2]"]
body = "y = take(x, k, 1)"
'''


@pytest.mark.parametrize("opt", ["0", "2"])
@pytest.mark.parametrize("mnk", [(1, 1, 1), (1, 3, 2), (3, 2, 4), (7, 5, 3), (4, 13, 6)])
def test_take_along_an_axis_whose_stride_is_a_sum(compile_composites, opt, mnk):
    """Found as: t3 = take(x1, x2, 0) with x1: f64[M, N + 1, 2] and x2: i32[N + 2, N] (max abs
    err 1.84 against the reference at every level), and take of x1[::-1, 1:] (stride N - 1)."""
    lib = compile_composites(TAKE_STRIDES, name="take_strides", opt=opt)
    m, n, k = mnk
    x = randn((m, n + 1, 2))
    idx = rng(1).integers(-m, m, k).astype(np.int64)
    assert_close(lib["take_stride_sum"](x, idx), np.take(x, idx, axis=0), **EXACT)

    x2 = randn((m, n), np.float64, seed=2)
    for pos in (0, m - 1, -1):
        got = lib["take_stride_difference"](x2, np.int32(pos))
        assert_close(got, x2[:, 1:][pos], **EXACT)

    x3 = randn((2, m, n + 2), seed=3)
    idx3 = rng(4).integers(-m, m, (k, 2)).astype(np.int64)
    assert_close(lib["take_middle_axis"](x3, idx3), np.take(x3, idx3, axis=1), **EXACT)


# ------------------------------------------------------------------------------------------
# `--test` (catenc.testing) on a composite compiled with -D N=..., whose test.ranges bound
# uses N: the bounds were evaluated without the fixed symbol and --test died with an internal
# compiler error (KeyError: 'N', exit 4).

RANGES_OVER_A_FIXED_SYMBOL = """
[composite.gather_rows]
inputs = ["x: f32[N, M]", "idx: i64[K]"]
outputs = ["y: f32[K, M]"]
where = ["N >= 1"]
test.ranges = { idx = ["-N", "N"] }
body = "y = take(x, idx, 0)"
"""


def test_test_ranges_over_a_symbol_fixed_with_define(tmp_path):
    """`catenc compile gather.toml -D N=5 --test "M=3,K=4"`: internal compiler error,
    KeyError: 'N' in catenc/testing/check.py input_range. Expected: the check runs and passes."""
    path = tmp_path / "gather.toml"
    path.write_text(RANGES_OVER_A_FIXED_SYMBOL)
    rt = load_runtime("clang")
    options = Options(rt, config=rt.validate_config({}), opt="2", defines={"N": 5})
    plan = plan_file(str(path), options)
    written = build(plan, options, BuildRequest(str(path), str(tmp_path / "out"), ("c", "h", "manifest", "so")))
    library = load(written["manifest"])

    x = randn((5, 3))
    idx = np.array([4, -5, 0, -1], dtype=np.int64)
    assert_close(library["gather_rows"](x, idx), x[idx], **EXACT)

    checks, _ = check_entries(plan, library, {"M": 3, "K": 4})
    assert checks and all(c.ok for c in checks)


# ------------------------------------------------------------------------------------------
# Flattening a tensor whose dims are only known non-negative from a constraint: for
# x: [M - 1, K] with `M >= 1`, reshape(x, [-1]) and flatten(x) were rejected with "the dim
# K*M - K of this reshape(...) may be negative": the prover does not see that a product of
# non-negative factors is non-negative. numpy flattens it to (M - 1)*K elements.

FLATTEN_CONSTRAINED = '''
[composite.flatten_shifted]
inputs = ["x: f32[M - 1, K]"]
outputs = ["y: f32[(M - 1)*K]", "z: f32[(M - 1)*K]"]
where = ["M >= 1"]
body = """
y = reshape(x, [-1])
z = flatten(x) * 2.0
"""

[composite.flatten_square_minus]
inputs = ["x: f32[N, N - 1]"]
outputs = ["y: f32[N*N - N]"]
where = ["N >= 1"]
body = "y = reshape(x, [-1])"
'''


@pytest.mark.parametrize("mk", [(1, 3), (2, 1), (5, 4), (13, 7)])
def test_flatten_of_dims_non_negative_by_a_constraint(compile_composites, mk):
    """Found as: t2[i, j] = x1[i, j] + j * 3; t3 = reshape(t2, [-1]) with x1: i64[M - 1, K] and
    where = ["M >= 1"] (rejected; about 0.5% of generated programs hit this)."""
    lib = compile_composites(FLATTEN_CONSTRAINED, name="flatten_constrained")
    m, k = mk
    x = randn((m - 1, k))
    y, z = lib["flatten_shifted"](x)
    assert_close(y, x.reshape(-1), **EXACT)
    assert_close(z, x.reshape(-1) * np.float32(2), **EXACT)
    x2 = randn((m, max(m - 1, 0)), seed=1)
    assert_close(lib["flatten_square_minus"](x2), x2.reshape(-1), **EXACT)


# ------------------------------------------------------------------------------------------
# The library's tile (`y[..., j] = x[..., j % N]`) called on a tensor whose last dim is the
# literal 0: rejected from inside the op library ("catenc:ops/shape.toml:106:24: an index may
# only be divided by a positive constant or symbol"), though the loop over j is empty.
# numpy: np.tile of an empty axis is empty.

TILE_EMPTY = '''
[composite.tile_empty]
inputs = ["x: f64[N, 2]"]
outputs = ["y: f64[N, 0]", "z: f64[N, 6]"]
body = """
e = x[:, 2:]
y = tile(e, reps=3)
z = tile(x, reps=3)
"""
'''


@pytest.mark.parametrize("n", [0, 1, 4])
def test_tile_of_a_literal_empty_axis(compile_composites, n):
    """Found as: t4[i] = (0.5 - t2[i + 2]) + x3[i] (t2: [2], so t4: [0]); t7 = tile(t4, reps=3)."""
    lib = compile_composites(TILE_EMPTY, name="tile_empty")
    x = randn((n, 2), np.float64)
    y, z = lib["tile_empty"](x)
    assert_close(y, np.tile(x[:, 2:], [1, 3]), **EXACT)
    assert_close(z, np.tile(x, [1, 3]), **EXACT)


# ------------------------------------------------------------------------------------------
# f16: catenc's reference interpreter (the oracle of --test) rounds the outputs of a called
# composite to f16 but keeps the caller's intermediates in f32. For t = x * 1.1 (an unrounded
# intermediate) and mu, var = moments(t), mu is round_f16(t) while t is not, so with one
# element t - mu is a rounding error instead of 0 and layernorm(t, g, b) = (t - mu) *
# rsqrt(var + eps) * g + b amplifies it by 1/sqrt(eps) ~ 316 (0.05 off b). The compiled code
# stores t as f16 and gets exactly 0 and b, as numpy does for one element.

F16_MEAN_OF_AN_INTERMEDIATE = '''
[composite.centered16]
inputs = ["x: f16[4, N]"]
outputs = ["d: f16[4, N]"]
body = """
t = x * 1.1
mu, var = moments(t)
d = t - mu
"""

[composite.layernorm16]
inputs = ["x: f16[4, N]", "g: f16[N]", "b: f16[N]"]
outputs = ["y: f16[4, N]"]
body = """
t = x * 1.1
y = layernorm(t, g, b)
"""
'''


def test_f16_intermediate_minus_its_mean_from_a_call_in_the_reference(tmp_path):
    """Found as: t5 = pow(abs(t3) + 0.5, tanh(x4)); t8 = layernorm(t5, x6, x7) in f16 at N=1:
    -O0, -O2 and -O3 all gave t8 = x7 (right), the reference x7 +- 0.05 (a --test mismatch)."""
    path = tmp_path / "f16.toml"
    path.write_text(F16_MEAN_OF_AN_INTERMEDIATE)
    rt = load_runtime("clang")
    options = Options(rt, config=rt.validate_config({}), opt="2")
    plan = plan_file(str(path), options)
    written = build(plan, options, BuildRequest(str(path), str(tmp_path / "out"), ("c", "h", "manifest", "so")))
    library = load(written["manifest"])
    entries = {e.name: e for e in plan.entries}

    x = randn((4, 1), seed=5).astype(np.float16)
    g = np.array([0.954], dtype=np.float16)
    b = np.array([-0.508], dtype=np.float16)
    zeros = np.zeros((4, 1), np.float16)
    assert_close(library["centered16"](x), zeros, **EXACT)
    assert_close(library["layernorm16"](x, g, b), np.broadcast_to(b, (4, 1)), **EXACT)

    values = {"x": x.astype(np.float32), "g": g.astype(np.float32), "b": b.astype(np.float32)}
    centered = run_program(entries["centered16"].program, {"x": values["x"]}, {"N": 1})
    assert_close(centered["d"], zeros.astype(np.float32), **EXACT)
    normed = run_program(entries["layernorm16"].program, values, {"N": 1})
    assert_close(normed["y"], np.broadcast_to(values["b"], (4, 1)), **EXACT)


# ------------------------------------------------------------------------------------------
# A load under a guard that is false for every index (`x4[i - 1, j]` only where i >= 1, with
# K fixed to 1 so i is always 0) reads the input at a constant leading index -1. -O2 turned a
# constant leading index into a view pointer (`x4_at-1`: not a C name, and a pointer before
# the array); views are now made only for indices inside a leading dim of known size.

GUARDED_NEGATIVE_SLICE = '''
[composite.guarded_negative_slice]
inputs = ["x4: i64[K - 1, M]", "w: f32[3, M]"]
outputs = ["t6: i64[K, M]", "y: f32[M]"]
body = """
t6[i, j] = where(i >= 1, x4[i - 1, j], -1) * i
y = w[2] * 2.0
"""
'''


@pytest.mark.parametrize("m", [0, 1, 5])
def test_guarded_load_at_a_negative_constant_index(tmp_path, m):
    path = tmp_path / "g.toml"
    path.write_text(GUARDED_NEGATIVE_SLICE)
    rt = load_runtime("clang")
    options = Options(rt, config=rt.validate_config({}), opt="2", defines={"K": 1})
    plan = plan_file(str(path), options)
    views = [b.name for b in plan.entries[0].schedule.graph.buffers if b.role == "view"]
    assert views == ["w_at2"]
    lib = load(
        build(plan, options, BuildRequest(str(path), str(tmp_path / "o"), ("c", "h", "manifest", "so")))["manifest"]
    )
    w = randn((3, m))
    t6, y = lib.guarded_negative_slice(np.zeros((0, m), np.int64), w)
    assert_close(t6, np.zeros((1, m), np.int64), **EXACT)
    assert_close(y, w[2] * 2, **EXACT)


# ------------------------------------------------------------------------------------------
# A contraction whose operand is read through a flattened index over a sum-sized axis: the
# einsum's reduction index reads x3 as x3[f % (M + 1), f // (M + 1)] with f = (M + 1)*k + j.
# The divisions by `M + 1` were not simplified (only single-term divisors were), and once -O3
# jammed the rows of k the verifier could no longer prove the reads in bounds (internal
# compiler error under CATENC_VERIFY_IR=1). `M*k + k + j` is now split as `(M + 1)*k + j`.

SUM_DIVISOR = """
[composite.sum_divisor]
inputs = ["x1: u32[N, M + 1]", "x3: u32[M + 1, 2*M]", "x5: u32[2*M, M]"]
outputs = ["t2: u32[N, M + 1]", "t6: u32[N]"]
body = '''
t2 = ~x1
t4 = einsum("ij,jk->ik", t2, x3)
t6[i] = min[k](t4[i, k] * prod[r](x5[k, r] - t4[i, k]))
'''
"""


@pytest.mark.parametrize("opt", ["0", "3"])
@pytest.mark.parametrize("nm", [(0, 0), (1, 1), (16, 2), (5, 7)])
def test_division_by_a_sum_sized_axis_in_jammed_rows(compile_composites, opt, nm):
    """Found as f0_2 of the differential fuzzer (derandomized): -O3 --config OMP=1 failed the
    verifier after jam-rows ('cannot prove ((4*M*i6_jam + 4*i6_jam + r2_1) // (M + 1)) < 2*M')."""
    lib = compile_composites(SUM_DIVISOR, name="sum_divisor", opt=opt)
    n, m = nm
    gen = rng(5)
    x1 = gen.integers(0, 2**32, (n, m + 1), dtype=np.uint32)
    x3 = gen.integers(0, 2**32, (m + 1, 2 * m), dtype=np.uint32)
    x5 = gen.integers(0, 2**32, (2 * m, m), dtype=np.uint32)
    t2, t6 = lib["sum_divisor"](x1, x3, x5)
    t4 = (~x1).astype(np.uint64) @ x3.astype(np.uint64) % 2**32
    prods = np.prod((x5[None, :, :].astype(np.uint64) - t4[:, :, None]) % 2**32, axis=2, dtype=np.uint64)
    want = np.min((t4 * (prods % 2**32)) % 2**32, axis=1, initial=2**32 - 1).astype(np.uint32)
    assert_close(t2, ~x1, **EXACT)
    assert_close(t6, want, **EXACT)


def test_a_sum_divisor_splits_only_where_terms_cancel() -> None:
    from catenc.symbolic import floordiv, mod, sym

    m, i, r, k = sym("M"), sym("i"), sym("r"), sym("K")
    assert str(mod(m * i + i + r, m + 1)) == "(r % (M + 1))"
    assert str(floordiv(2 * m * i + 2 * i, m + 1)) == "2*i"
    assert str(floordiv(k + 3, k + 4)) == "((K + 3) // (K + 4))"  # no negative remainder


# ------------------------------------------------------------------------------------------
# A strided slice (`x[::2]`, length (K + 1)//2) read at `i // 2` by a loop over twice its
# length: inlined at -O2, the load is x[2*(i // 2)] with i < 2*((K + 1)//2), in bounds (for odd
# K, i reaches K and reads x[K - 1]), but the verifier could not prove 2*(i // 2) < K (an
# internal compiler error under CATENC_VERIFY_IR=1). c*(a // c) < d is now proved as
# a < c*ceil(d / c).

STRIDED_PAIRS = '''
[composite.strided_pairs]
inputs = ["x2: i32[K]", "x5: i32[2*((K + 1)//2)]", "x7: i32[2*M]"]
outputs = ["t8: i32[2*((K + 1)//2) + 2*M]"]
body = """
t4 = x2[::2]
t6[i] = t4[i // 2] + x5[i]
t8 = concat_last(t6, x7)
"""
'''


@pytest.mark.parametrize("opt", ["0", "2"])
@pytest.mark.parametrize(("k", "m"), [(0, 0), (1, 1), (2, 0), (7, 3), (17, 2)])
def test_a_strided_slice_read_at_half_the_index(compile_composites, opt, k, m):
    """Found as f1_5 of the differential fuzzer (derandomized, 25 examples of 12): -O2 failed the
    verifier after inline-computes ('cannot prove 2*(i13 // 2) < K on axis 0 of x2')."""
    lib = compile_composites(STRIDED_PAIRS, name="strided_pairs", opt=opt)
    gen = rng(11)
    x2 = gen.integers(-1000, 1000, k, dtype=np.int32)
    x5 = gen.integers(-1000, 1000, 2 * ((k + 1) // 2), dtype=np.int32)
    x7 = gen.integers(-1000, 1000, 2 * m, dtype=np.int32)
    want = np.concatenate([x2[::2][np.arange(x5.size) // 2] + x5, x7])
    assert_close(lib["strided_pairs"](x2, x5, x7), want, **EXACT)


# ------------------------------------------------------------------------------------------
# An axis fixed to 0 by -D: indices under its empty range simplify vacuously (`t[i, j // 3]`
# with j < 0 became `t[i, 0]`), and lowering hoisted `exp(-t[i, 0])` out of the loop that never
# runs, so the kernel read column 0 of a tensor with no columns. The verifier caught the read
# after lower-loops. A value is no longer hoisted out of a loop of constant extent 0.

EMPTY_LOOP_HOIST = '''
[composite.silu_repeated]
inputs = ["x: f32[5, N]"]
outputs = ["t: f32[5, N]", "y: f32[5, 3*N]"]
body = """
t = 0.5 - x
y[i, j] = silu(t[i, j // 3])
"""
'''


@pytest.mark.parametrize("n", [0, 2])
def test_nothing_is_hoisted_out_of_a_loop_that_never_runs(tmp_path, n):
    """Found as f1_7 of the fuzzer at -D N=0: t4[i, j] = silu(t2[i, j]) + ...; t5[i, j] = t4[i, j // 3]."""
    lib = compile_text(tmp_path, EMPTY_LOOP_HOIST, defines={"N": n})
    x = randn((5, n))
    t, y = lib["silu_repeated"](x)
    want = 0.5 - x
    assert_close(t, want, rtol=1e-6, atol=1e-6)
    assert_close(y, np.repeat(want / (1 + np.exp(-want)), 3, axis=1), rtol=1e-5, atol=1e-6)
