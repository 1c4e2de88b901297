"""The attention and sequence ops of the op library (ops/attention.toml), called from wrapper
composites with concrete shapes, against numpy computed here.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, randint, randn

from catenc.loader import CatencStatusError

TOL = {"f32": dict(rtol=2e-5, atol=2e-5), "f64": dict(rtol=1e-12, atol=1e-12), "f16": dict(rtol=2e-3, atol=2e-3)}

SOURCE = '''
[composite.t_attn_f32]
inputs = ["q: f32[B, H, TQ, D]", "k: f32[B, H, TK, D]", "v: f32[B, H, TK, DV]", "mask: f32[TQ, TK]"]
outputs = [
    "plain: f32[B, H, TQ, DV]",
    "causal: f32[B, H, TQ, DV]",
    "masked: f32[B, H, TQ, DV]",
    "both: f32[B, H, TQ, DV]",
]
body = """
plain = attention(q, k, v)
causal = attention(q, k, v, causal=True)
masked = attention_masked(q, k, v, mask)
both = attention_masked(q, k, v, mask, causal=True)
"""

[composite.t_attn_gqa_f32]
inputs = ["q: f32[B, H, TQ, D]", "k: f32[B, 1, TK, D]", "v: f32[B, 1, TK, D]", "mask: f32[TQ, TK]"]
outputs = ["y: f32[B, H, TQ, D]", "z: f32[B, H, TQ, D]"]
body = """
y = attention(q, k, v, causal=True)
z = attention_masked(q, k, v, mask)
"""

[composite.t_attn_f64]
inputs = ["q: f64[TQ, D]", "k: f64[TK, D]", "v: f64[TK, DV]"]
outputs = ["plain: f64[TQ, DV]", "causal: f64[TQ, DV]"]
body = """
plain = attention(q, k, v)
causal = attention(q, k, v, causal=True)
"""

[composite.t_attn_f16]
inputs = ["q: f16[B, TQ, D]", "k: f16[B, TK, D]", "v: f16[B, TK, D]"]
outputs = ["y: f16[B, TQ, D]"]
body = "y = attention(q, k, v, causal=True)"

[composite.t_rope_f32]
inputs = ["x: f32[B, S, D]", "pos: i64[S]"]
outputs = ["half: f32[B, S, D]", "pairs: f32[B, S, D]", "at: f32[B, S, D]", "based: f32[B, S, D]"]
body = """
half = rope(x)
pairs = rope_interleaved(x)
at = rope_positions(x, pos)
based = rope(x, base=500.0)
"""

[composite.t_rope_f64]
inputs = ["x: f64[S, D]"]
outputs = ["half: f64[S, D]", "pairs: f64[S, D]"]
body = """
half = rope(x)
pairs = rope_interleaved(x)
"""

[composite.t_rope_f16]
inputs = ["x: f16[A, B, S, D]"]
outputs = ["y: f16[A, B, S, D]"]
body = "y = rope(x)"

[composite.t_embedding]
inputs = ["table: f32[V, E]", "ids: i64[B, T]", "flat: i64[T]", "table16: f16[V, E]"]
outputs = ["y: f32[B, T, E]", "z: f32[T, E]", "h: f16[B, T, E]"]
body = """
y = embedding(table, ids)
z = embedding(table, flat)
h = embedding(table16, ids)
"""

[composite.t_cumsum]
inputs = ["x: f32[B, N]", "d: f64[N]", "i: i32[A, B, N]", "h: f16[B, N]"]
outputs = ["cx: f32[B, N]", "cd: f64[N]", "ci: i32[A, B, N]", "ch: f16[B, N]"]
body = """
cx = cumsum(x)
cd = cumsum(d)
ci = cumsum(i)
ch = cumsum(h)
"""
'''


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(SOURCE)


def np_attention(q, k, v, mask=None, causal=False):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    s = np.einsum("...id,...jd->...ij", q, k) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = s + mask.astype(np.float64)
    if causal:
        s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("...ij,...jd->...id", p / p.sum(axis=-1, keepdims=True), v)


ATTN_SIZES = [(1, 1, 1, 1, 1, 1), (2, 3, 7, 7, 5, 3), (1, 2, 13, 11, 8, 7), (2, 1, 5, 37, 16, 1)]


@pytest.mark.parametrize("b,h,tq,tk,d,dv", ATTN_SIZES)
def test_attention_f32(lib, b, h, tq, tk, d, dv):
    q, k, v = randn((b, h, tq, d), seed=1), randn((b, h, tk, d), seed=2), randn((b, h, tk, dv), seed=3)
    mask = randn((tq, tk), seed=4)
    plain, causal, masked, both = lib["t_attn_f32"](q, k, v, mask)
    assert_close(plain, np_attention(q, k, v), **TOL["f32"])
    assert_close(causal, np_attention(q, k, v, causal=True), **TOL["f32"])
    assert_close(masked, np_attention(q, k, v, mask), **TOL["f32"])
    assert_close(both, np_attention(q, k, v, mask, causal=True), **TOL["f32"])


@pytest.mark.parametrize("b,h,tq,tk,d", [(1, 1, 1, 1, 1), (2, 4, 7, 13, 8), (3, 2, 11, 5, 3)])
def test_attention_broadcasts_shared_keys(lib, b, h, tq, tk, d):
    """k and v with one head for all of q's heads: the `...` dims broadcast (docs/language.md)."""
    q, k, v = randn((b, h, tq, d), seed=1), randn((b, 1, tk, d), seed=2), randn((b, 1, tk, d), seed=3)
    mask = randn((tq, tk), seed=4)
    for _ in range(3):  # an out-of-bounds read of k or v would show as garbage sooner or later
        y, z = lib["t_attn_gqa_f32"](q, k, v, mask)
        assert_close(y, np_attention(q, k, v, causal=True), **TOL["f32"])
        assert_close(z, np_attention(q, k, v, mask), **TOL["f32"])


@pytest.mark.parametrize("tq,tk,d,dv", [(1, 1, 1, 1), (7, 13, 5, 3), (37, 11, 16, 2)])
def test_attention_f64_and_f16(lib, tq, tk, d, dv):
    q, k, v = randn((tq, d), np.float64, 1), randn((tk, d), np.float64, 2), randn((tk, dv), np.float64, 3)
    plain, causal = lib["t_attn_f64"](q, k, v)
    assert_close(plain, np_attention(q, k, v), **TOL["f64"])
    assert_close(causal, np_attention(q, k, v, causal=True), **TOL["f64"])
    qh, kh, vh = randn((2, tq, d), np.float16, 4), randn((2, tk, d), np.float16, 5), randn((2, tk, d), np.float16, 6)
    y = lib["t_attn_f16"](qh, kh, vh)
    assert_close(y, np_attention(qh, kh, vh, causal=True), dtype=np.float16, **TOL["f16"])


def np_rope(x, pos=None, base=10000.0, interleaved=False):
    x = np.asarray(x, dtype=np.float64)
    s, d = x.shape[-2:]
    pos = np.arange(s) if pos is None else np.asarray(pos)
    freq = 1.0 / base ** (np.arange(0, d, 2) / d)
    angle = pos[:, None] * freq[None, :]
    rot = np.cos(angle) + 1j * np.sin(angle)
    if interleaved:
        z = (x[..., 0::2] + 1j * x[..., 1::2]) * rot
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = z.real, z.imag
        return out
    z = (x[..., : d // 2] + 1j * x[..., d // 2 :]) * rot
    return np.concatenate([z.real, z.imag], axis=-1)


@pytest.mark.parametrize("b,s,d", [(1, 1, 2), (2, 7, 4), (3, 13, 14), (1, 37, 32)])
def test_rope(lib, b, s, d):
    x = randn((b, s, d), seed=1)
    pos = randint((s,), 0, 4096, np.int64, seed=2)
    half, pairs, at, based = lib["t_rope_f32"](x, pos)
    tol = dict(rtol=1e-5, atol=1e-6)
    assert_close(half, np_rope(x), **tol)
    assert_close(pairs, np_rope(x, interleaved=True), **tol)
    assert_close(at, np_rope(x, pos), **tol)
    assert_close(based, np_rope(x, base=500.0), **tol)
    x64 = x[0].astype(np.float64)
    half64, pairs64 = lib["t_rope_f64"](x64)
    assert_close(half64, np_rope(x64), **TOL["f64"])
    assert_close(pairs64, np_rope(x64, interleaved=True), **TOL["f64"])
    xh = randn((2, b, s, d), np.float16, seed=3)
    assert_close(lib["t_rope_f16"](xh), np_rope(xh), dtype=np.float16, rtol=1e-3, atol=1e-3)


def test_rope_odd_head_dim_is_a_shape_error(lib):
    with pytest.raises(CatencStatusError) as info:
        lib["t_rope_f64"](randn((3, 5), np.float64))
    assert info.value.code == "CATENC_E_SHAPE"


@pytest.mark.parametrize("v,e,b,t", [(1, 1, 1, 1), (13, 7, 2, 5), (37, 3, 3, 11)])
def test_embedding(lib, v, e, b, t):
    table = randn((v, e), seed=1)
    ids = randint((b, t), 0, v - 1, np.int64, seed=2)
    flat = randint((t,), -v, v - 1, np.int64, seed=3)  # negative ids wrap once, as numpy's
    y, z, h = lib["t_embedding"](table, ids, flat, table.astype(np.float16))
    assert_close(y, table[ids], rtol=0, atol=0)
    assert_close(z, table[flat], rtol=0, atol=0)
    assert_close(h, table.astype(np.float16)[ids], dtype=np.float16, rtol=0, atol=0)


@pytest.mark.parametrize("bad", [13, -14, 1000])
def test_embedding_out_of_range_id(lib, bad):
    table = randn((13, 3))
    ids = np.array([[0, 1], [bad, 2]], dtype=np.int64)
    with pytest.raises(CatencStatusError) as info:
        lib["t_embedding"](table, ids, np.zeros(2, np.int64), table.astype(np.float16))
    assert info.value.code == "CATENC_E_INDEX"


@pytest.mark.parametrize("a,b,n", [(1, 1, 1), (2, 3, 7), (1, 2, 37)])
def test_cumsum(lib, a, b, n):
    x, d = randn((b, n), seed=1), randn((n,), np.float64, seed=2)
    i = randint((a, b, n), -1000, 1000, np.int32, seed=3)
    h = randn((b, n), np.float16, seed=4)
    cx, cd, ci, ch = lib["t_cumsum"](x, d, i, h)
    assert_close(cx, np.cumsum(x.astype(np.float64), axis=-1), rtol=1e-5, atol=1e-5)
    assert_close(cd, np.cumsum(d), **TOL["f64"])
    assert_close(ci, np.cumsum(i.astype(np.int64), axis=-1), dtype=np.int32)
    assert_close(ch, np.cumsum(h.astype(np.float64), axis=-1), dtype=np.float16, rtol=1e-3, atol=1e-3)
