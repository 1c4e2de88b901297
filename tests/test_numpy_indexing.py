"""numpy subscripts in array form: None, '...', and advanced indexing by integer tensors
(docs/language.md, section 8). Each form is compared with numpy's own result on the same arrays."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from catenc.loader import CatencStatusError
from tests.conftest import assert_close, randint, randn

EXACT = {"rtol": 0, "atol": 0}

INDEXING = """
[composite.per_channel]
inputs = ["x: f32[N, C, H, W]", "gamma: f32[C]"]
outputs = ["y: f32[N, C, H, W]"]
body = "y = x * gamma[:, None, None]"

[composite.new_axes]
inputs = ["x: f32[A, B, C]"]
outputs = ["last: f32[A, B, C, 1]", "first: f32[1, A, B, C]", "dropped: f32[A, B]", "mixed: f32[A, 1, 2, C]"]
where = ["C >= 1", "B >= 3"]
body = '''
last = x[..., None]
first = x[None]
dropped = x[..., 0]
mixed = x[:, None, 1:3, ...]
'''

[composite.pick]
inputs = ["logp: f32[N, C]", "target: i64[N]"]
outputs = ["y: f32[N]"]
body = "y = logp[arange(N), target]"

[composite.embed]
inputs = ["emb: f32[V, D]", "ids: i64[B, T]"]
outputs = ["y: f32[B, T, D]"]
body = "y = emb[ids]"

[composite.columns]
inputs = ["x: f32[M, K]", "idx: i32[J]"]
outputs = ["y: f32[M, J]"]
body = "y = x[:, idx]"

[composite.separated]
inputs = ["x: f32[A, B, C]", "i: i64[P, 1]", "j: i16[Q]"]
outputs = ["y: f32[P, Q, B]"]
body = "y = x[i, :, j]"

[composite.adjacent]
inputs = ["x: f32[A, B, C, D]", "i: i64[P, 1]", "j: u8[Q]"]
outputs = ["y: f32[A, P, Q, D]"]
body = "y = x[:, i, j, :]"

[composite.pairs]
inputs = ["x: f64[A, B]", "i: i64[P]", "j: i32[P]"]
outputs = ["y: f64[P]"]
body = "y = x[i, j]"

[composite.with_scalars]
inputs = ["x: f32[A, B, C]", "j: i64[J]"]
outputs = ["inner: f32[A, J]", "outer: f32[J, B]"]
where = ["A >= 2", "B >= 2"]
body = '''
inner = x[:, 1, j]
outer = x[-1, :, j]
'''

[composite.with_slices_and_none]
inputs = ["x: f32[A, B, C]", "i: i32[P]"]
outputs = ["y: f32[1, P, B - 1, 1, C]", "z: f32[P, 1, B]"]
where = ["B >= 1", "C >= 1"]
body = '''
y = x[None, i, 1:, None]
z = x[i, None, ..., 0]
'''

[composite.of_expression]
inputs = ["x: f32[N, C]", "t: i64[N]"]
outputs = ["y: f32[N]", "s: f32[]"]
where = ["N >= 1"]
body = '''
y = exp(x)[arange(N), t] + 1.0
s = x[0:1, :][0, argmax(x[0], axis=0)]
'''

[composite.through_views]
inputs = ["x: f32[M, N]", "ids: i64[K]", "t: i32[M]"]
outputs = ["a: f32[K, M]", "b: f32[M - 1, K]", "d: f32[M]"]
where = ["M >= 1"]
body = '''
a = x.T[ids]
b = x[1:, ids]
d = (x * 2.0 + 1.0)[arange(M), t]
'''

[composite.strided_rows]
inputs = ["x: f32[M, N]", "rows: i64[K]"]
outputs = ["c: f32[K, N]", "e: f32[K, N]"]
body = '''
c = x[::2][rows]
e = x[rows][:, ::-1]
'''
"""


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(INDEXING)


@pytest.mark.parametrize("n,c,h,w", [(1, 1, 1, 1), (2, 3, 4, 5), (3, 7, 2, 1)])
def test_none_adds_unit_axes(lib, n, c, h, w):
    x, gamma = randn((n, c, h, w)), randn(c, seed=1)
    assert_close(lib["per_channel"](x, gamma), x * gamma[:, None, None], **EXACT)


@pytest.mark.parametrize("a,b,c", [(1, 3, 1), (2, 5, 4), (3, 4, 7)])
def test_ellipsis_and_none(lib, a, b, c):
    x = randn((a, b, c))
    last, first, dropped, mixed = lib["new_axes"](x)
    assert_close(last, x[..., None], **EXACT)
    assert_close(first, x[None], **EXACT)
    assert_close(dropped, x[..., 0], **EXACT)
    assert_close(mixed, x[:, None, 1:3, ...], **EXACT)


@pytest.mark.parametrize("n,c", [(1, 1), (5, 3), (13, 10)])
def test_pick_by_arange_and_target(lib, n, c):
    logp = randn((n, c))
    target = randint(n, -c, c - 1, np.int64)  # negative targets count from the end
    assert_close(lib["pick"](logp, target), logp[np.arange(n), target], **EXACT)


@pytest.mark.parametrize("v,d,b,t", [(1, 1, 1, 1), (7, 3, 2, 5), (13, 17, 3, 1)])
def test_embedding_rows(lib, v, d, b, t):
    emb = randn((v, d))
    ids = randint((b, t), -v, v - 1, np.int64)
    assert_close(lib["embed"](emb, ids), emb[ids], **EXACT)


def test_columns(lib):
    x = randn((4, 6))
    idx = np.array([5, 0, -1, 2, -6], dtype=np.int32)
    assert_close(lib["columns"](x, idx), x[:, idx], **EXACT)


@pytest.mark.parametrize("a,b,c,p,q", [(1, 1, 1, 1, 1), (3, 4, 5, 2, 3), (5, 2, 7, 4, 1)])
def test_separated_arrays_go_first(lib, a, b, c, p, q):
    x = randn((a, b, c))
    i = randint((p, 1), -a, a - 1, np.int64)
    j = randint(q, -c, c - 1, np.int16, seed=1)
    expected = x[i, :, j]
    assert expected.shape == (p, q, b)
    assert_close(lib["separated"](x, i, j), expected, **EXACT)


def test_adjacent_arrays_stay_in_place(lib):
    x = randn((2, 3, 4, 5))
    i = np.array([[2], [-3], [0]], dtype=np.int64)
    j = np.array([3, 0], dtype=np.uint8)
    expected = x[:, i, j, :]
    assert expected.shape == (2, 3, 2, 5)
    assert_close(lib["adjacent"](x, i, j), expected, **EXACT)


@pytest.mark.parametrize("a,b,p", [(1, 1, 1), (4, 6, 9), (7, 3, 2)])
def test_two_gathered_axes(lib, a, b, p):
    x = randn((a, b), dtype=np.float64)
    i = randint(p, -a, a - 1, np.int64)
    j = randint(p, -b, b - 1, np.int32, seed=2)
    assert_close(lib["pairs"](x, i, j), x[i, j], **EXACT)


def test_scalar_index_among_arrays(lib):
    """An integer beside an array counts as an advanced index: adjacent stays, separated goes first."""
    x = randn((3, 4, 5))
    j = np.array([4, -5, 1, 1], dtype=np.int64)
    inner, outer = lib["with_scalars"](x, j)
    assert x[:, 1, j].shape == (3, 4) and x[-1, :, j].shape == (4, 4)
    assert_close(inner, x[:, 1, j], **EXACT)
    assert_close(outer, x[-1, :, j], **EXACT)


@pytest.mark.parametrize("a,b,c", [(1, 1, 1), (3, 4, 5)])
def test_arrays_with_slices_and_none(lib, a, b, c):
    x = randn((a, b, c))
    i = randint(4, -a, a - 1, np.int32)
    y, z = lib["with_slices_and_none"](x, i)
    assert_close(y, x[None, i, 1:, None], **EXACT)
    assert_close(z, x[i, None, ..., 0], **EXACT)


def test_index_of_an_expression(lib):
    x = randn((5, 3))
    t = np.array([0, 2, -1, 1, -3], dtype=np.int64)
    y, s = lib["of_expression"](x, t)
    assert_close(y, np.exp(x)[np.arange(5), t] + 1, rtol=1e-6, atol=0)
    assert_close(s, x[0:1, :][0, np.argmax(x[0], axis=0)], **EXACT)


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (5, 3, 4), (8, 9, 2)])
def test_gathers_through_views_and_expressions(lib, m, n, k):
    x = randn((m, n))
    ids, t = randint(k, -n, n - 1, np.int64), randint(m, -n, n - 1, np.int32, seed=1)
    a, b, d = lib["through_views"](x, ids, t)
    assert_close(a, x.T[ids], **EXACT)
    assert_close(b, x[1:, ids], **EXACT)
    assert_close(d, (x * 2 + 1)[np.arange(m), t], **EXACT)
    half = (m + 1) // 2
    rows = randint(k, -half, half - 1, np.int64, seed=2)
    c, e = lib["strided_rows"](x, rows)
    assert_close(c, x[::2][rows], **EXACT)
    assert_close(e, x[rows][:, ::-1], **EXACT)


def test_views_are_gathered_in_place(tmp_path):
    """A gather from a transpose, a slice or a cheap expression of an input reads the input itself;
    a strided view and a transcendental expression are copied once first (exp is not recomputed per pick)."""
    (tmp_path / "m.toml").write_text(INDEXING)
    done = subprocess.run(
        [sys.executable, "-m", "catenc", "compile", "m.toml", "-o", "out", "--emit", "ir"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    graphs = {g.split("(")[0]: g for g in (tmp_path / "out" / "m.ir.txt").read_text().split("graph ")[1:]}
    copies = {
        name: [line.split("[")[0].strip() for line in g.splitlines() if "gathered" in line.split("=")[0]]
        for name, g in graphs.items()
    }
    assert copies["through_views"] == [], graphs["through_views"]
    assert copies["strided_rows"] == ["gathered"], graphs["strided_rows"]  # x[::2] only
    assert copies["pick"] == [] and copies["embed"] == [] and copies["columns"] == []
    assert copies["of_expression"] == ["gathered"], graphs["of_expression"]  # exp(x) once


@pytest.mark.parametrize("bad", [3, -4, 100, np.iinfo(np.int64).min])
def test_out_of_range_index_returns_catenc_e_index(lib, bad):
    logp = randn((2, 3))
    with pytest.raises(CatencStatusError) as info:
        lib["pick"](logp, np.array([0, bad]))
    assert info.value.status == 3
    x = randn((3, 3), dtype=np.float64)
    with pytest.raises(CatencStatusError) as info:
        lib["pairs"](x, np.array([0, bad]), np.array([1, 0], dtype=np.int32))
    assert info.value.status == 3


@pytest.mark.parametrize("bad", [3, -4])
def test_out_of_range_in_the_second_gathered_axis(lib, bad):
    x = randn((3, 3), dtype=np.float64)
    with pytest.raises(CatencStatusError) as info:
        lib["pairs"](x, np.array([0, 1]), np.array([0, bad], dtype=np.int32))
    assert info.value.status == 3


# ---------------------------------------------------------------------------------- diagnostics

DIAG_RE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.+)$")


def compile_error(tmp_path: Path, inputs: str, outputs: str, body: str) -> tuple[int, str]:
    """(column, message) of the error compiling a one-statement body; the body is on line 4."""
    text = f'[composite.f]\ninputs = [{inputs}]\noutputs = [{outputs}]\nbody = "{body}"\n'
    (tmp_path / "m.toml").write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "catenc", "compile", "m.toml", "-S", "-o", "out"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    match = DIAG_RE.match(done.stderr.splitlines()[0])
    assert match and match["file"] == "m.toml" and match["line"] == "4", done.stderr
    return int(match["col"]), match["msg"]


def column_of(body: str, token: str) -> int:
    return len('body = "') + body.index(token) + 1


@pytest.mark.parametrize(
    "inputs,body,token,words",
    [
        ('"g: f32[C]"', "y = g[:, None, 1]", "1]", ["too many indices: 2", "rank 1", "None adds an axis"]),
        ('"x: f32[A, B]"', "y = x[..., None, ...]", "...]", ["only one '...'"]),
        ('"x: f32[A, B]", "m: bool[A]"', "y = x[m]", "m]", ["bool mask", "not supported"]),
        ('"x: f32[A, B]", "v: f32[A]"', "y = x[v]", "v]", ["integer", "f32"]),
        ('"x: f32[A, B]", "i: i64[P]", "j: i64[Q]"', "y = x[i, j]", "i, j", ["index arrays", "[P], [Q]", "broadcast"]),
        ('"x: f32[A, B]"', "y = x[:, -1]", "-1", ["index B - 1 may be out of bounds"]),
    ],
)
def test_diagnostics(tmp_path, inputs, body, token, words):
    col, message = compile_error(tmp_path, inputs, '"y: f32[A]"', body)
    assert col == column_of(body, token), message
    for word in words:
        assert word in message, message
