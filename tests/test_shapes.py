"""Shape functions, slicing and constructors (docs/language.md) against numpy.

Views (reshape, transpose, slices ...) are folded into index maps by the compiler; these
tests check that every fold stays exact, alone and chained, at -O0 and -O2.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, rng

EXACT = dict(rtol=0, atol=0)

SOURCE = '''
[composite.reshape_swap]
inputs = ["x: f32[A, B]"]
outputs = ["y: f32[B, A]"]
body = "y = reshape(x, [B, A])"

[composite.reshape_flat]
inputs = ["x: f32[A, B, C]"]
outputs = ["y: f32[A*B*C]", "z: f32[A, B*C]", "w: f32[A*B, C]"]
body = """
y = reshape(x, [-1])
z = reshape(x, [A, -1])
w = reshape(x, [-1, C])
"""

[composite.reshape_split]
inputs = ["x: f64[A, 6]"]
outputs = ["y: f64[A, 2, 3]", "z: f64[3*A, 2]", "w: f64[A, 3, 2, 1]"]
body = """
y = reshape(x, [A, 2, 3])
z = reshape(x, [-1, 2])
w = reshape(x, [A, 3, -1, 1])
"""

[composite.reshape_add]
inputs = ["x: f32[A, B]", "v: f32[A*B]"]
outputs = ["y: f32[A, B]"]
body = "y = x + reshape(v, [A, B]) * 2.0"

[composite.transposes]
inputs = ["x: f32[A, B, C]"]
outputs = ["t: f32[C, B, A]", "p: f32[B, A, C]", "q: f32[C, A, B]", "r: f32[C, B, A]"]
body = """
t = transpose(x)
p = transpose(x, [1, 0, 2])
q = transpose(x, [2, 0, 1])
r = x.T
"""

[composite.dot_t]
inputs = ["x: f64[A, B]", "y: f64[B, A]"]
outputs = ["z: f64[A, B]", "w: f64[A, A]"]
body = """
z = x.T.T + y.T
w = x @ x.T
"""

[composite.expands]
inputs = ["x: f32[1, M]", "v: f32[M]", "c: f32[N, 1]"]
outputs = ["y: f32[N, M]", "z: f32[N, M]", "w: f32[2, N, M]"]
body = """
y = expand(x, [N, M])
z = expand(v, [N, M])
w = expand(c, [2, N, M])
"""

[composite.squeezes]
inputs = ["x: f32[A, 1, B]", "v: f32[B, 1]"]
outputs = ["y: f32[A, B]", "z: f32[B]", "u: f32[1, B]", "w: f32[B, 1, 1]", "m: f32[A, 1, B, 1]"]
body = """
y = squeeze(x, 1)
z = squeeze(v, -1)
u = unsqueeze(z, 0)
w = unsqueeze(v, -1)
m = unsqueeze(x, 3)
"""

[composite.flattens]
inputs = ["x: f32[A, B, C, D]"]
outputs = ["f: f32[A*B*C*D]", "g: f32[A, B*C*D]", "h: f32[A*B, C, D]", "k: f32[A, B*C, D]"]
body = """
f = flatten(x)
g = flatten(x, 1)
h = flatten(x, start=0, end=1)
k = flatten(x, 1, 2)
"""

[composite.slice_inner]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N-2]"]
where = ["N >= 2"]
body = "y = x[1:N-1]"

[composite.slice_steps]
inputs = ["x: f32[N]"]
outputs = ["e: f32[(N+1)//2]", "o: f32[N//2]", "r: f32[N]", "rs: f32[(N+1)//2]"]
body = """
e = x[::2]
o = x[1::2]
r = x[::-1]
rs = x[::-2]
"""

[composite.slice_negative]
inputs = ["x: f32[N]"]
outputs = ["a: f32[3]", "b: f32[N-1]", "d: f32[N//2]"]
where = ["N >= 3"]
body = """
a = x[-3:]
b = x[:-1]
d = x[N-1:0:-2]
"""

[composite.slice_2d]
inputs = ["x: f32[M, N]"]
outputs = ["a: f32[N]", "b: f32[N]", "d: f32[M-1, (N+1)//2]", "e: f32[M, N]"]
where = ["M >= 1", "N >= 1"]
body = """
a = x[0]
b = x[-1]
d = x[1:, ::2]
e = x[::-1, ::-1]
"""

[composite.slice_3d]
inputs = ["x: f64[A, B, C]"]
outputs = ["b: f64[B, C]", "d: f64[A-1, B, C-1]"]
where = ["A >= 2", "B >= 2", "C >= 2"]
body = """
b = x[-2, :, :]
d = x[:-1, ::-1, 1:]
"""

[composite.concats]
inputs = ["a: f32[A, B]", "b: f32[C, B]", "c: f32[A, D]"]
outputs = ["r: f32[A+C, B]", "s: f32[A, B+D]", "t: f32[A, D+B+D]", "u: f32[2*A+C, B]"]
body = """
r = concat([a, b], 0)
s = concat([a, c], 1)
t = concat([c, a, c], -1)
u = concat([a, b, a], axis=0)
"""

[composite.concat3]
inputs = ["a: f64[A, B, C]", "b: f64[A, B, D]", "c: f64[A, 1, C]"]
outputs = ["r: f64[A, B, C+D]", "s: f64[A, B+1, C]", "t: f64[2*A, B, C]"]
body = """
r = concat([a, b], 2)
s = concat([a, c], 1)
t = concat([a, a * 2.0], 0)
"""

[composite.stacks]
inputs = ["a: f32[N, M]", "b: f32[N, M]", "c: f32[N, M]"]
outputs = ["s0: f32[3, N, M]", "s1: f32[N, 2, M]", "s2: f32[N, M, 3]"]
body = """
s0 = stack([a, b, c], 0)
s1 = stack([a, c], 1)
s2 = stack([a, b, c], axis=-1)
"""

[composite.pads]
inputs = ["x: f32[A, B]"]
outputs = ["p: f32[A+3, B+3]", "q: f32[A+2, B]", "r: f32[A, B+4]"]
body = """
p = pad(x, [[1, 2], [0, 3]])
q = pad(x, [[1, 1], [0, 0]], value=-1.5)
r = pad(x, [[0, 0], [4, 0]], value=-inf)
"""

[composite.pad_int]
inputs = ["x: i32[N]"]
outputs = ["p: i32[N+5]"]
body = "p = pad(x, [[2, 3]], value=7)"

[composite.aranges]
inputs = []
outputs = ["a: i64[N]", "f: f32[N]", "d: f64[N]"]
body = """
a = arange(N)
f = arange(N, dtype=f32) * 0.5
d = cast(arange(N, dtype=i64), f64) - 1.0
"""

[composite.arange_use]
inputs = ["x: f32[N, M]"]
outputs = ["y: f32[N, M]"]
body = "y = x * cast(arange(M), f32) + cast(reshape(arange(N), [N, 1]), f32)"

[composite.constructors]
inputs = ["x: f32[N, M]"]
outputs = ["z: f32[N, M]", "o: i32[N]", "f: f64[N, 2]", "s: f32[N, M]", "u: u8[M]"]
body = """
z = zeros([N, M], f32)
o = ones([N], i32) * 3
f = full([N, 2], 3.25, f64)
s = x + full([N, M], -2.0, f32) + ones([M], f32)
u = full([M], 200, u8) + ones([M], u8)
"""

[composite.chain_views]
inputs = ["x: f32[A, B, C]"]
outputs = ["y: f32[C-1, A*B]", "z: f32[B, A]"]
where = ["C >= 2", "A >= 1"]
body = """
t = transpose(x, [2, 0, 1])
y = reshape(t[1:], [C-1, A*B]) + 1.0
z = squeeze(x[:, :, ::-1][:, :, :1], 2).T * 2.0
"""

[composite.chain_pad_slice]
inputs = ["x: f32[N, M]"]
outputs = ["y: f32[N, M]", "w: f32[N+M, 2]"]
where = ["M >= 1"]
body = """
p = pad(x, [[1, 1], [1, 1]])
y = p[2:, 1:M+1] + p[:N, 1:-1] - p[1:N+1, 2:]
w = concat([stack([x.T[0], x.T[-1]], 1), zeros([M, 2], f32)], 0)
"""

[composite.views_materialised]
inputs = ["x: f32[A, B]", "y: f32[A, 4]"]
outputs = ["t: f32[A*B]", "s: f32[2*A]", "r: f32[B, A]", "c: f32[2*B, A]"]
body = """
t = reshape(transpose(x), [-1])
s = reshape(y[:, ::2], [-1])
r = reshape(x[::-1], [B, A])
c = concat([x.T, x[::-1].T * 2.0], 0)
"""

[composite.views_reduced]
inputs = ["x: f32[A, B]", "z: f32[A, B, C]"]
outputs = ["s: f32[A]", "m: f32[A]", "f: f32[C*B, A]", "k: f32[A, B, C]"]
body = """
s = sum(x.T, axis=0)
m = max(x[::-1, ::-1], axis=1)
f = flatten(z.T, 0, 1)
k = z - mean(z, axis=(0, 2), keepdims=True)
"""

[composite.misc_shapes]
inputs = ["x: f32[A, B, C]", "v: f32[N]", "a: f32", "b: f32"]
outputs = ["p: f32[C, A, B]", "q: f32[2]", "u: f32[N]", "w: f32[N]", "g: f32[A, B*C]", "h: f32[A*B, C]"]
body = """
p = transpose(x, [-1, 0, 1])
q = stack([a, b], 0)
u = concat([v], 0) + v.T
w = full([N], alpha, f32) + full([N], a, f32)
g = flatten(x, start=-2)
h = flatten(x, end=-2)
"""
params = { alpha = 2.5 }

[composite.misc_slices]
inputs = ["x: f32[N]"]
outputs = ["y: f32[(N+1)//3]", "h: f32[N - N//2]", "z: f32[N+1]", "c: f32[N]", "d: f32[N]"]
body = """
y = x[1:N:3]
h = x[N//2:]
z = zeros([N+1], f32) + 1.0
c = x
d = c * 2.0
"""
[composite.param_shapes]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N + 4]", "r: f32[2, N]", "s: f32[1, N]", "a: i64[5]"]
params = { p = 2, v = 1.5, k = 2 }
body = """
y = pad(x, [[p, p]], value=v)
r = reshape(concat([x, x], 0), [k, -1])
s = stack([x], 0)
a = arange(5)
"""

[composite.roll_fused]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]", "z: f32[N]"]
where = ["N >= 1"]
body = """
t = x * 3.0 + 1.0
y = t[::-1] + t
z = concat([t[1:], t[:1]], 0) * t
"""
'''


@pytest.fixture(scope="module", params=["0", "2"], ids=["O0", "O2"])
def lib(request, compile_composites):
    return compile_composites(SOURCE, name="shapes", opt=request.param)


def randn(shape, dtype=np.float32, seed=0):
    return rng(seed).standard_normal(shape).astype(dtype)


SIZES2 = [(0, 3), (1, 1), (1, 7), (7, 13), (13, 1), (37, 5)]
SIZES3 = [(1, 1, 1), (2, 7, 13), (3, 1, 5), (7, 13, 2), (0, 2, 3), (2, 3, 0)]


@pytest.mark.parametrize("ab", SIZES2)
def test_reshape_swap(lib, ab):
    x = randn(ab)
    assert_close(lib["reshape_swap"](x), x.reshape(ab[1], ab[0]), **EXACT)


@pytest.mark.parametrize("abc", SIZES3)
def test_reshape_flat(lib, abc):
    x = randn(abc)
    a, b, c = abc
    y, z, w = lib["reshape_flat"](x)
    assert_close(y, x.reshape(-1), **EXACT)
    assert_close(z, x.reshape(a, b * c), **EXACT)
    assert_close(w, x.reshape(a * b, c), **EXACT)


@pytest.mark.parametrize("a", [0, 1, 7, 13])
def test_reshape_split(lib, a):
    x = randn((a, 6), np.float64)
    y, z, w = lib["reshape_split"](x)
    assert_close(y, x.reshape(a, 2, 3), **EXACT)
    assert_close(z, x.reshape(3 * a, 2), **EXACT)
    assert_close(w, x.reshape(a, 3, 2, 1), **EXACT)


@pytest.mark.parametrize("ab", SIZES2)
def test_reshape_in_expression(lib, ab):
    x = randn(ab)
    v = randn(ab[0] * ab[1], seed=1)
    assert_close(lib["reshape_add"](x, v), x + v.reshape(ab) * np.float32(2), **EXACT)


@pytest.mark.parametrize("abc", SIZES3)
def test_transposes(lib, abc):
    x = randn(abc)
    t, p, q, r = lib["transposes"](x)
    assert_close(t, np.transpose(x), **EXACT)
    assert_close(p, np.transpose(x, (1, 0, 2)), **EXACT)
    assert_close(q, np.transpose(x, (2, 0, 1)), **EXACT)
    assert_close(r, x.T, **EXACT)


@pytest.mark.parametrize("ab", SIZES2)
def test_dot_transpose(lib, ab):
    x = randn(ab, np.float64)
    y = randn(ab[::-1], np.float64, seed=2)
    z, w = lib["dot_t"](x, y)
    assert_close(z, x + y.T, **EXACT)
    assert_close(w, x @ x.T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nm", SIZES2)
def test_expand(lib, nm):
    n, m = nm
    x = randn((1, m))
    v = randn(m, seed=1)
    c = randn((n, 1), seed=2)
    y, z, w = lib["expands"](x, v, c)
    assert_close(y, np.broadcast_to(x, (n, m)), **EXACT)
    assert_close(z, np.broadcast_to(v, (n, m)), **EXACT)
    assert_close(w, np.broadcast_to(c, (2, n, m)), **EXACT)


@pytest.mark.parametrize("ab", SIZES2)
def test_squeeze_unsqueeze(lib, ab):
    a, b = ab
    x = randn((a, 1, b))
    v = randn((b, 1), seed=1)
    y, z, u, w, m = lib["squeezes"](x, v)
    assert_close(y, np.squeeze(x, 1), **EXACT)
    assert_close(z, np.squeeze(v, -1), **EXACT)
    assert_close(u, np.expand_dims(np.squeeze(v, -1), 0), **EXACT)
    assert_close(w, np.expand_dims(v, -1), **EXACT)
    assert_close(m, np.expand_dims(x, 3), **EXACT)


@pytest.mark.parametrize("abcd", [(1, 1, 1, 1), (2, 3, 5, 7), (1, 13, 1, 2), (0, 2, 3, 4), (3, 2, 0, 1)])
def test_flatten(lib, abcd):
    a, b, c, d = abcd
    x = randn(abcd)
    f, g, h, k = lib["flattens"](x)
    assert_close(f, x.reshape(-1), **EXACT)
    assert_close(g, x.reshape(a, -1) if x.size else np.zeros((a, b * c * d)), **EXACT)
    assert_close(h, x.reshape(a * b, c, d), **EXACT)
    assert_close(k, x.reshape(a, b * c, d), **EXACT)


@pytest.mark.parametrize("n", [2, 3, 7, 13, 37])
def test_slice_symbolic_bounds(lib, n):
    x = randn(n)
    assert_close(lib["slice_inner"](x), x[1 : n - 1], **EXACT)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 13, 37])
def test_slice_steps(lib, n):
    x = randn(n)
    e, o, r, rs = lib["slice_steps"](x)
    assert_close(e, x[::2], **EXACT)
    assert_close(o, x[1::2], **EXACT)
    assert_close(r, x[::-1], **EXACT)
    assert_close(rs, x[::-2], **EXACT)


@pytest.mark.parametrize("n", [3, 4, 7, 13, 37])
def test_slice_negative_values(lib, n):
    x = randn(n)
    a, b, d = lib["slice_negative"](x)
    assert_close(a, x[-3:], **EXACT)
    assert_close(b, x[:-1], **EXACT)
    assert_close(d, x[n - 1 : 0 : -2], **EXACT)


SLICE_NEGATIVE_SYMBOLIC = """
[composite.slice_negative_symbolic]
inputs = ["x: f32[N]"]
outputs = ["c: f32[N-2]"]
where = ["N >= 3"]
body = "c = x[-N+1:-1]"
"""


def test_slice_negative_symbolic_start(compile_composites):
    """A symbolic start that is negative (-N+1, N >= 3) counts from the end, as in numpy."""
    lib = compile_composites(SLICE_NEGATIVE_SYMBOLIC)
    for n in (3, 4, 7, 13, 37):
        x = randn(n)
        assert_close(lib["slice_negative_symbolic"](x), x[-n + 1 : -1], **EXACT)


@pytest.mark.parametrize("mn", [(1, 1), (1, 7), (7, 13), (13, 1), (37, 5)])
def test_slice_2d_and_integer_index(lib, mn):
    x = randn(mn)
    a, b, d, e = lib["slice_2d"](x)
    assert_close(a, x[0], **EXACT)
    assert_close(b, x[-1], **EXACT)
    assert_close(d, x[1:, ::2], **EXACT)
    assert_close(e, x[::-1, ::-1], **EXACT)


@pytest.mark.parametrize("abc", [(2, 2, 2), (3, 7, 13), (13, 2, 5), (2, 37, 3)])
def test_slice_3d(lib, abc):
    x = randn(abc, np.float64)
    b, d = lib["slice_3d"](x)
    assert_close(b, x[-2, :, :], **EXACT)
    assert_close(d, x[:-1, ::-1, 1:], **EXACT)


INNER_INTEGER_INDEX = """
[composite.column]
inputs = ["x: f32[M, N]"]
outputs = ["c: f32[M]", "l: f32[M]"]
where = ["N >= 1"]
body = "c = x[:, 0]; l = x[:, -1]"

[composite.element]
inputs = ["x: f32[M, N]"]
outputs = ["f: f32"]
where = ["M >= 1", "N >= 1"]
body = "f = x[M-1, 0]"

[composite.inner3]
inputs = ["x: f64[A, B, C]"]
outputs = ["a: f64[A, C]", "c: f64[A, B]"]
where = ["B >= 2", "C >= 1"]
body = "a = x[:, 1]; c = x[..., 0]"
"""


def test_integer_index_of_inner_dims(compile_composites):
    """An integer index on a non-leading dim: the dropped dims still give the strides."""
    lib = compile_composites(INNER_INTEGER_INDEX)
    for m, n in [(1, 1), (7, 13), (13, 1), (3, 37)]:
        x = randn((m, n))
        c, last = lib["column"](x)
        assert_close(c, x[:, 0], **EXACT)
        assert_close(last, x[:, -1], **EXACT)
        assert_close(lib["element"](x), x[m - 1, 0], **EXACT)
    for shape in [(1, 2, 1), (3, 7, 13), (2, 13, 5)]:
        x = randn(shape, np.float64)
        a, c = lib["inner3"](x)
        assert_close(a, x[:, 1], **EXACT)
        assert_close(c, x[..., 0], **EXACT)


@pytest.mark.parametrize("abcd", [(1, 1, 1, 1), (2, 7, 3, 13), (7, 1, 13, 2), (0, 3, 2, 1), (3, 0, 0, 2)])
def test_concat(lib, abcd):
    a, b, c, d = abcd
    x = randn((a, b))
    y = randn((c, b), seed=1)
    z = randn((a, d), seed=2)
    r, s, t, u = lib["concats"](x, y, z)
    assert_close(r, np.concatenate([x, y], 0), **EXACT)
    assert_close(s, np.concatenate([x, z], 1), **EXACT)
    assert_close(t, np.concatenate([z, x, z], -1), **EXACT)
    assert_close(u, np.concatenate([x, y, x], axis=0), **EXACT)


@pytest.mark.parametrize("abcd", [(1, 1, 1, 1), (2, 3, 7, 13), (3, 13, 2, 1), (0, 2, 2, 2), (2, 2, 3, 0)])
def test_concat_3d(lib, abcd):
    a, b, c, d = abcd
    x = randn((a, b, c), np.float64)
    y = randn((a, b, d), np.float64, seed=1)
    z = randn((a, 1, c), np.float64, seed=2)
    r, s, t = lib["concat3"](x, y, z)
    assert_close(r, np.concatenate([x, y], 2), **EXACT)
    assert_close(s, np.concatenate([x, z], 1), **EXACT)
    assert_close(t, np.concatenate([x, x * 2.0], 0), **EXACT)


@pytest.mark.parametrize("nm", SIZES2)
def test_stack(lib, nm):
    a, b, c = (randn(nm, seed=s) for s in range(3))
    s0, s1, s2 = lib["stacks"](a, b, c)
    assert_close(s0, np.stack([a, b, c], 0), **EXACT)
    assert_close(s1, np.stack([a, c], 1), **EXACT)
    assert_close(s2, np.stack([a, b, c], axis=-1), **EXACT)


@pytest.mark.parametrize("ab", SIZES2)
def test_pad(lib, ab):
    x = randn(ab)
    p, q, r = lib["pads"](x)
    assert_close(p, np.pad(x, [[1, 2], [0, 3]]), **EXACT)
    assert_close(q, np.pad(x, [[1, 1], [0, 0]], constant_values=-1.5), **EXACT)
    assert_close(r, np.pad(x, [[0, 0], [4, 0]], constant_values=-np.inf), **EXACT)


@pytest.mark.parametrize("n", [0, 1, 7, 13])
def test_pad_int(lib, n):
    x = np.arange(n, dtype=np.int32) - 3
    np.testing.assert_array_equal(lib["pad_int"](x), np.pad(x, [[2, 3]], constant_values=7))


@pytest.mark.parametrize("n", [0, 1, 7, 13, 37])
def test_arange(lib, n):
    a, f, d = lib["aranges"](N=n)
    assert_close(a, np.arange(n, dtype=np.int64), dtype=np.int64)
    assert_close(f, np.arange(n, dtype=np.float32) * np.float32(0.5), dtype=np.float32, **EXACT)
    assert_close(d, np.arange(n, dtype=np.float64) - 1.0, dtype=np.float64, **EXACT)


@pytest.mark.parametrize("nm", SIZES2)
def test_arange_in_expression(lib, nm):
    n, m = nm
    x = randn(nm)
    expected = x * np.arange(m, dtype=np.float32) + np.arange(n, dtype=np.float32)[:, None]
    assert_close(lib["arange_use"](x), expected, **EXACT)


@pytest.mark.parametrize("nm", SIZES2)
def test_constructors(lib, nm):
    n, m = nm
    x = randn(nm)
    z, o, f, s, u = lib["constructors"](x)
    assert_close(z, np.zeros((n, m), np.float32), dtype=np.float32, **EXACT)
    assert_close(o, np.full(n, 3, np.int32), dtype=np.int32)
    assert_close(f, np.full((n, 2), 3.25), dtype=np.float64, **EXACT)
    assert_close(s, x - np.float32(2) + np.float32(1), **EXACT)
    assert_close(u, np.full(m, 201, np.uint8), dtype=np.uint8)


RESHAPE_INFER_SLICED = """
[composite.reshape_infer_sliced]
inputs = ["x: f32[C, A, B]"]
outputs = ["y: f32[C-1, A*B]"]
where = ["C >= 1"]
body = "y = reshape(x[1:], [C-1, -1])"
"""


def test_reshape_infer_after_slice(compile_composites):
    """-1 is inferred from a total of (C-1)*A*B elements (a sliced dim times others)."""
    lib = compile_composites(RESHAPE_INFER_SLICED)
    for shape in [(1, 1, 1), (2, 7, 13), (5, 3, 1), (13, 2, 2)]:
        x = randn(shape)
        expected = x[1:].reshape(shape[0] - 1, shape[1] * shape[2])
        assert_close(lib["reshape_infer_sliced"](x), expected, **EXACT)


BOOL_CONSTRUCTORS = (
    """
[composite.bool_constructors]
inputs = ["x: f32[M]"]
outputs = ["b: bool[M]", "c: bool[M]", "d: bool[M]"]
body = """
    + '"""'
    + """
b = zeros([M], bool)
c = ones([M], bool)
d = full([M], True, bool) & (x > 0)
"""
    + '"""\n'
)


def test_bool_constructors(compile_composites):
    """zeros/ones/full of dtype bool give False/True (numpy)."""
    lib = compile_composites(BOOL_CONSTRUCTORS)
    for m in (0, 1, 7, 13):
        x = randn(m)
        b, c, d = lib["bool_constructors"](x)
        assert_close(b, np.zeros(m, bool), dtype=np.bool_)
        assert_close(c, np.ones(m, bool), dtype=np.bool_)
        assert_close(d, x > 0, dtype=np.bool_)


@pytest.mark.parametrize("abc", [(1, 1, 2), (2, 7, 13), (3, 1, 5), (7, 13, 2), (1, 37, 3)])
def test_chained_views(lib, abc):
    a, b, c = abc
    x = randn(abc)
    y, z = lib["chain_views"](x)
    t = np.transpose(x, (2, 0, 1))
    assert_close(y, t[1:].reshape(c - 1, -1) + np.float32(1), **EXACT)
    assert_close(z, np.squeeze(x[:, :, ::-1][:, :, :1], 2).T * np.float32(2), **EXACT)


@pytest.mark.parametrize("nm", [(1, 1), (1, 7), (7, 13), (13, 1), (37, 5), (0, 2)])
def test_chained_pad_slice(lib, nm):
    n, m = nm
    x = randn(nm)
    y, w = lib["chain_pad_slice"](x)
    p = np.pad(x, [[1, 1], [1, 1]])
    assert_close(y, p[2:, 1 : m + 1] + p[:n, 1:-1] - p[1 : n + 1, 2:], rtol=1e-6, atol=1e-6)
    expected_w = np.concatenate([np.stack([x.T[0], x.T[-1]], 1), np.zeros((m, 2))], 0)
    assert_close(w, expected_w, **EXACT)


@pytest.mark.parametrize("ab", SIZES2)
def test_views_materialised(lib, ab):
    """reshape of a non-contiguous view (transposed, strided, reversed) copies in order."""
    a, b = ab
    x = randn(ab)
    y = randn((a, 4), seed=1)
    t, s, r, c = lib["views_materialised"](x, y)
    assert_close(t, np.transpose(x).reshape(-1), **EXACT)
    assert_close(s, y[:, ::2].reshape(-1), **EXACT)
    assert_close(r, x[::-1].reshape(b, a), **EXACT)
    assert_close(c, np.concatenate([x.T, x[::-1].T * np.float32(2)], 0), **EXACT)


@pytest.mark.parametrize("abc", SIZES3)
def test_views_reduced(lib, abc):
    a, b, c = abc
    x = randn((a, b))
    z = randn(abc, seed=1)
    s, m, f, k = lib["views_reduced"](x, z)
    assert_close(s, x.T.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)
    expected_m = x[::-1, ::-1].max(axis=1) if b else np.full(a, -np.inf)
    assert_close(m, expected_m, **EXACT)
    assert_close(f, z.T.reshape(c * b, a), **EXACT)
    if z.size:
        mean = z.astype(np.float64).mean(axis=(0, 2), keepdims=True)
        assert_close(k, z - mean, rtol=1e-5, atol=1e-5)
    else:
        assert k.shape == abc


@pytest.mark.parametrize("abcn", [(1, 1, 1, 1), (2, 7, 13, 5), (3, 1, 5, 37), (0, 2, 3, 0)])
def test_misc_shapes(lib, abcn):
    a, b, c, n = abcn
    x, v = randn((a, b, c)), randn(n, seed=1)
    p, q, u, w, g, h = lib["misc_shapes"](x, v, np.float32(1.5), np.float32(-4))
    assert_close(p, np.transpose(x, (-1, 0, 1)), **EXACT)
    assert_close(q, np.array([1.5, -4], np.float32), **EXACT)
    assert_close(u, v + v, **EXACT)
    assert_close(w, np.full(n, 4.0, np.float32), **EXACT)
    assert_close(g, x.reshape(a, b * c), **EXACT)
    assert_close(h, x.reshape(a * b, c), **EXACT)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 13, 37])
def test_misc_slices(lib, n):
    x = randn(n)
    y, h, z, c, d = lib["misc_slices"](x)
    assert_close(y, x[1:n:3], **EXACT)
    assert_close(h, x[n // 2 :], **EXACT)
    assert_close(z, np.ones(n + 1, np.float32), **EXACT)
    assert_close(c, x, **EXACT)
    assert_close(d, x * np.float32(2), **EXACT)


@pytest.mark.parametrize("n", [0, 1, 7, 13, 37])
def test_params_in_shape_functions(lib, n):
    x = randn(n)
    y, r, s, a = lib["param_shapes"](x)
    assert_close(y, np.pad(x, [[2, 2]], constant_values=1.5), **EXACT)
    assert_close(r, np.concatenate([x, x]).reshape(2, -1) if n else np.zeros((2, 0)), **EXACT)
    assert_close(s, np.stack([x], 0), **EXACT)
    np.testing.assert_array_equal(a, np.arange(5))


@pytest.mark.parametrize("n", [1, 2, 7, 13, 37])
def test_roll_of_fused_intermediate(lib, n):
    x = randn(n)
    y, z = lib["roll_fused"](x)
    t = x * np.float32(3) + np.float32(1)
    assert_close(y, t[::-1] + t, **EXACT)
    assert_close(z, np.roll(t, -1) * t, **EXACT)


ROLL_ANY_N = """
[composite.roll]
inputs = ["x: f32[N]"]
outputs = ["z: f32[N]"]
body = "z = concat([x[1:], x[:1]], 0) * x"
"""


def test_roll_shape_for_every_n(compile_composites):
    """len(x[1:]) + len(x[:1]) is max(0, N-1) + min(1, N) == N for every N >= 0."""
    lib = compile_composites(ROLL_ANY_N)
    for n in (0, 1, 2, 7, 13):
        x = randn(n)
        assert_close(lib["roll"](x), np.roll(x, -1) * x, **EXACT)


# Slices whose length is provably the declared one for every allowed N, though it takes
# min/max/floor-division reasoning: (name, composite text, numpy of x, sizes)
PROVABLE_SLICES = {
    "floordiv_stop": (
        """
[composite.f]
inputs = ["x: f32[N]"]
outputs = ["y: f32[(N - 1) // 2]"]
where = ["N >= 1"]
body = "y = x[:(N-1)//2]"
""",
        lambda x: x[: (len(x) - 1) // 2],
        (1, 2, 7, 13),
    ),
    "half_up_stop": (
        """
[composite.f]
inputs = ["x: f32[N]"]
outputs = ["y: f32[(N + 1) // 2]"]
body = "y = x[:(N+1)//2]"
""",
        lambda x: x[: (len(x) + 1) // 2],
        (0, 1, 2, 7, 13),
    ),
    "empty_range": (
        """
[composite.f]
inputs = ["x: f32[N]"]
outputs = ["y: f32[0]", "z: f32[N]"]
body = "y = x[3:3]; z = x"
""",
        lambda x: x[3:3],
        (0, 1, 5),
    ),
}


@pytest.mark.parametrize("case", list(PROVABLE_SLICES))
def test_slice_lengths_that_need_min_max_reasoning(compile_composites, case):
    text, ref, sizes = PROVABLE_SLICES[case]
    lib = compile_composites(text)
    for n in sizes:
        x = randn(n)
        out = lib["f"](x)
        assert_close(out[0] if isinstance(out, tuple) else out, ref(x), **EXACT)
