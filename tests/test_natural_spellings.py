"""Natural Python spellings in a composite body (docs/language.md, sections 4 and 6), against numpy:
a name assigned again holds its newest value, as in Python; inputs, params and symbols may be named
like built-in functions; numpy's and PyTorch's method spellings `x.sum(axis=-1)`. Each error case
checks its exact FILE:LINE:COL diagnostic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_close, np_gelu, randn

from catenc.diagnostics import CatencError
from catenc.driver import plan_file
from catenc.plan import Options
from catenc.runtime.descriptor import load_runtime


def error_of(directory: Path, text: str) -> str:
    """The diagnostic planning `text` (as model.toml) gives, as `FILE:LINE:COL: error: MESSAGE`."""
    path = directory / "model.toml"
    path.write_text(text)
    rt = load_runtime("clang")
    with pytest.raises(CatencError) as caught:
        plan_file(str(path), Options(rt, config=rt.validate_config({})))
    error = caught.value
    return f"{Path(error.loc.path).name}:{error.loc.line}:{error.loc.col}: error: {error.message}"


# ---- reassignment ------------------------------------------------------------------------------

REASSIGN = '''
[composite.twice]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = """
y = x * 2.0
y = y + 1.0
"""

[composite.softmax_by_hand]
inputs = ["x: f32[N, D]"]
outputs = ["p: f32[N, D]"]
body = """
x = x - max(x, axis=-1, keepdims=True)
p = exp(x)
p = p / sum(p, axis=-1, keepdims=True)
"""

[composite.residual]
inputs = ["x: f32[N, D]"]
outputs = ["h: f32[N, D]"]
body = """
h = x
h = h + gelu(h)
h = h * 0.5 + h
"""

[composite.index_rebinds]
inputs = ["x: f32[N, D]"]
outputs = ["z: f32[N]", "w: f32[N, D]"]
where = ["D >= 1"]
body = """
z = sum(x, axis=1)
z[i] = z[i] * 2.0 + x[i, 0]
w[i, d] = x[i, d] * 3.0
w = w - 1.0
w[i, d] = w[i, d] * w[i, d]
"""

[composite.tuples_rebind]
inputs = ["x: f32[N, D]"]
outputs = ["m: f32[N, 1]", "v: f32[N, 1]"]
body = """
m, v = moments(x)
m, v = moments(x - m + v)
"""

[composite.augmented]
inputs = ["x: f32[N, D]", "w: f32[D, D]"]
outputs = ["y: f32[N, D]", "z: f32[N]"]
where = ["D >= 1"]
body = """
y = x
y @= w
y += 1.0
y *= x
y /= sum(abs(y), axis=-1, keepdims=True) + 1.0
z[i] = x[i, 0]
z[i] -= x[i, D - 1]
z **= 2.0
"""

[composite.reassigns_inside]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = """
x = x + 1.0
x = x * x
y = x
"""

[composite.caller]
inputs = ["x: f32[N]", "x_1: f32[N]", "y_1: f32[N]"]
outputs = ["y: f32[N]", "x_2: f32[N]"]
body = """
y = reassigns_inside(x)
y = y + x_1 * y_1
x = x + y
x_2 = x + x
"""
'''


@pytest.fixture(scope="module")
def reassign(compile_composites):
    return compile_composites(REASSIGN)


@pytest.mark.parametrize("n", [1, 7, 37])
def test_each_use_sees_the_latest_value(reassign, n: int) -> None:
    x = randn((n,))
    assert_close(reassign.twice(x), x * 2 + 1)


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (13, 37)])
def test_an_input_reassigned_is_never_written(reassign, shape) -> None:
    x = randn(shape, seed=1)
    kept = x.copy()
    shifted = x - x.max(axis=-1, keepdims=True)
    want = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    assert_close(reassign.softmax_by_hand(x), want)
    np.testing.assert_array_equal(x, kept)


@pytest.mark.parametrize("shape", [(1, 1), (5, 7)])
def test_a_statement_reads_the_old_value_it_replaces(reassign, shape) -> None:
    x = randn(shape, seed=2)
    h = x + np_gelu(x)
    assert_close(reassign.residual(x), h * 0.5 + h, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 1), (4, 9)])
def test_index_form_rebinds_after_array_form(reassign, shape) -> None:
    x = randn(shape, seed=3)
    z, w = reassign.index_rebinds(x)
    assert_close(z, x.sum(axis=1) * 2 + x[:, 0])
    assert_close(w, (x * 3 - 1) ** 2)


@pytest.mark.parametrize("n, d", [(1, 1), (5, 7)])
def test_augmented_assignment(reassign, n: int, d: int) -> None:
    x, w = randn((n, d), seed=9), randn((d, d), seed=10)
    y = (x @ w + 1) * x
    y = y / (np.abs(y).sum(-1, keepdims=True) + 1)
    got_y, got_z = reassign.augmented(x, w)
    assert_close(got_y, y, rtol=1e-5, atol=1e-5)
    assert_close(got_z, (x[:, 0] - x[:, -1]) ** 2)


SHAPES_BETWEEN = '''
[composite.shapes_between]
inputs = ["x: f32[N, 2*K]"]
outputs = ["y: f32[N, 2*K]"]
body = """
y = reshape(x, [N, 2, -1])
y = y - mean(y, axis=-1, keepdims=True)
y = reshape(y, [N, 2*K])
"""
'''


def test_an_output_may_hold_other_shapes_before_its_last_assignment(compile_composites) -> None:
    lib = compile_composites(SHAPES_BETWEEN)
    x = randn((3, 8), seed=4)
    grouped = x.reshape(3, 2, -1)
    assert_close(lib.shapes_between(x), (grouped - grouped.mean(axis=-1, keepdims=True)).reshape(3, 8))


def test_a_tuple_assignment_rebinds(reassign) -> None:
    x = randn((6, 10), seed=5)
    m, v = x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)
    shifted = x - m + v
    got_m, got_v = reassign.tuples_rebind(x)
    assert_close(got_m, shifted.mean(axis=-1, keepdims=True), atol=1e-5)
    assert_close(got_v, shifted.var(axis=-1, keepdims=True), rtol=1e-4, atol=1e-5)


def test_generated_names_never_meet_the_users(reassign) -> None:
    """`caller` declares x_1, y_1 and x_2, the names a reassigned x or y would take first."""
    x, x_1, y_1 = randn((9,), seed=6), randn((9,), seed=7), randn((9,), seed=8)
    y = (x + 1) ** 2 + x_1 * y_1
    got_y, got_x_2 = reassign.caller(x, x_1, y_1)
    assert_close(got_y, y)
    assert_close(got_x_2, 2 * (x + y))


def test_reassignment_compiles_the_same_every_time(tmp_path: Path) -> None:
    """The generated names are a function of the source: two builds emit the same C."""
    (tmp_path / "model.toml").write_text(REASSIGN)
    sources = []
    for k, seed in enumerate(("0", "12345")):
        subprocess.run(
            [sys.executable, "-m", "catenc", "compile", "model.toml", "-S", "-o", f"out{k}"],
            cwd=tmp_path, check=True, env={**os.environ, "PYTHONHASHSEED": seed}, timeout=300,
        )  # fmt: skip
        sources.append((tmp_path / f"out{k}" / "model.c").read_text())
    assert sources[0] == sources[1]


@pytest.mark.parametrize(
    "body, outputs, want",
    [
        (
            "y = x * 2.0\\nz = y",
            '["y: f32[N]", "z: f32[N]", "w: f32[N]"]',
            "model.toml:3:39: error: output 'w' is never assigned in the body of 'c'",
        ),
        (
            "y = x\\nN = y",
            '["y: f32[N]"]',
            "model.toml:4:16: error: 'N' is a symbol or param and cannot be assigned",
        ),
        (
            "y = x\\ny = sum(x)",
            '["y: f32[N]"]',
            "model.toml:4:20: error: 'y' is declared with shape [N] but this value has shape []",
        ),
        (
            "m, m = moments(x)\\ny = x",
            '["y: f32[N]"]',
            "model.toml:4:12: error: 'm' is assigned twice in this statement",
        ),
        (
            "y = y + x\\ny = x",
            '["y: f32[N]"]',
            "model.toml:4:13: error: unknown name 'y'",
        ),
    ],
)
def test_reassignment_errors(tmp_path: Path, body: str, outputs: str, want: str) -> None:
    text = f'[composite.c]\ninputs = ["x: f32[N]"]\noutputs = {outputs}\nbody = "{body}"\n'
    assert error_of(tmp_path, text) == want


# ---- names that hide built-ins -----------------------------------------------------------------

HIDING = '''
[composite.rotary]
inputs = ["x: f32[T, D]", "cos: f32[T, D]", "sin: f32[T, D]"]
outputs = ["y: f32[T, D]"]
where = ["D % 2 == 0"]
body = """
half = reshape(x, [T, 2, D // 2])
rotated = reshape(concat([-half[:, 1:, :], half[:, :1, :]], axis=1), [T, D])
y = x * cos + rotated * sin
"""

[composite.c_names]
inputs = ["exp: f32[sum]", "int: f32[sum]", "float: f32", "errno: f32[sum]"]
outputs = ["max: f32[sum]", "nan: f32", "printf: f32[sum]"]
params = { pi = 3.0, abs = 2 }
body = """
printf = exp * int + float * pi + errno
max = printf * abs
nan = mean(max, axis=0)
"""
'''


def rotate(x: np.ndarray) -> np.ndarray:
    half = x.shape[1] // 2
    return np.concatenate([-x[:, half:], x[:, :half]], axis=1)


@pytest.mark.parametrize("runtime", ["clang", "opencl"])
def test_inputs_named_cos_and_sin(compile_composites, runtime: str) -> None:
    lib = compile_composites(HIDING, runtime_name=runtime)
    for t, d in ((1, 2), (5, 8), (13, 38)):
        x, cos, sin = randn((t, d), seed=10), randn((t, d), seed=11), randn((t, d), seed=12)
        assert_close(lib.rotary(x, cos, sin), x * cos + rotate(x) * sin)


def test_c_keywords_and_library_names_as_tensors_params_and_symbols(compile_composites) -> None:
    lib = compile_composites(HIDING)
    for n in (1, 7, 37):
        exp, int_, errno = randn((n,), seed=13), randn((n,), seed=14), randn((n,), seed=15)
        float_ = np.float32(0.25)
        printf = exp * int_ + float_ * 3.0 + errno
        got_max, got_nan, got_printf = lib.c_names(exp, int_, float_, errno)
        assert_close(got_printf, printf)
        assert_close(got_max, printf * 2)
        assert_close(got_nan, (printf * 2).mean(), rtol=1e-5)


def test_generated_code_renames_what_collides_and_keeps_the_users_names(tmp_path: Path) -> None:
    (tmp_path / "model.toml").write_text(HIDING)
    subprocess.run(
        [sys.executable, "-m", "catenc", "compile", "model.toml", "-S", "-o", "out"], cwd=tmp_path, check=True
    )
    header = (tmp_path / "out" / "model.h").read_text()
    source = (tmp_path / "out" / "model.c").read_text()
    manifest = json.loads((tmp_path / "out" / "model.manifest.json").read_text())
    entries = {e["name"]: e for e in manifest["entries"]}
    assert [a["name"] for a in entries["rotary"]["args"] if a["role"] != "workspace"][:4] == ["x", "cos", "sin", "y"]
    assert "const float* x, const float* cos, const float* sin, float* y" in header  # a declaration may say cos
    assert "const float* restrict cos_1" in source and "const float* restrict cos," not in source
    assert "const float* int_1" in header and "const float* exp," in header  # a keyword never names a parameter
    assert [a["name"] for a in entries["c_names"]["args"] if a["role"] in ("input", "output", "dim")] == [
        "exp", "int", "float", "errno", "max", "nan", "printf", "sum"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "inputs, params, body, want",
    [
        (
            '["x: f32[N]", "cos: f32[N]"]',
            "{}",
            "y = cos(x)",
            "model.toml:5:13: error: 'cos' is a tensor here, not a function; "
            "it hides the function 'cos' (rename the tensor to call it)",
        ),
        (
            '["x: f32[N]"]',
            "{ max = 2.0 }",
            "y = x * max + max(x)",
            "model.toml:5:23: error: 'max' is a param here, not a function; "
            "it hides the function 'max' (rename the param to call it)",
        ),
        (
            '["x: f32[sum]"]',
            "{}",
            "y = x + sum(x)",
            "model.toml:5:17: error: 'sum' is a symbol here, not a function; "
            "it hides the function 'sum' (rename the symbol to call it)",
        ),
        (
            '["x: f32[N]", "softmax: f32[N]"]',
            "{}",
            "y = softmax(x)",
            "model.toml:5:13: error: 'softmax' is a tensor here, not a function; "
            "it hides the function 'softmax' (rename the tensor to call it)",
        ),
        (
            '["x: f32[N]", "max: f32[N, N]"]',
            "{}",
            "y[i] = max[k](x[k] * x[i])",
            "model.toml:5:16: error: 'max' is a tensor here, not a function; "
            "it hides the function 'max' (rename the tensor to call it)",
        ),
        (
            '["x: f32[N]"]',
            "{}",
            "h = x * 2.0\\ny = h(x)",
            "model.toml:5:26: error: 'h' is a tensor here, not a function",
        ),
        (
            '["x: f32[N]", "lambda: f32[N]"]',
            "{}",
            "y = x",
            "model.toml:2:25: error: tensor name 'lambda' is reserved (a Python keyword, which a body cannot use)",
        ),
        (
            '["x: f32[N]", "__x: f32[N]"]',
            "{}",
            "y = x",
            "model.toml:2:25: error: tensor name '__x' is reserved for the emitted C code",
        ),
        (
            '["x: f32[N]"]',
            "{ None = 1 }",
            "y = x",
            "model.toml:4:12: error: param name 'None' is reserved (a Python keyword, which a body cannot use)",
        ),
    ],
)
def test_hiding_errors(tmp_path: Path, inputs: str, params: str, body: str, want: str) -> None:
    text = f'[composite.c]\ninputs = {inputs}\noutputs = ["y: f32[N]"]\nparams = {params}\nbody = "{body}"\n'
    if "sum" in inputs:
        text = text.replace("y: f32[N]", "y: f32[sum]")
    assert error_of(tmp_path, text) == want


def test_a_composite_keeps_cs_rules(tmp_path: Path) -> None:
    """A composite's name is its entry's C symbol: a C library name is still refused there."""
    text = '[composite.exp]\ninputs = ["x: f32[N]"]\noutputs = ["y: f32[N]"]\nbody = "y = x"\n'
    want = "model.toml:1:12: error: composite name 'exp' is reserved (a C keyword or C library name)"
    assert error_of(tmp_path, text) == want


# ---- methods -----------------------------------------------------------------------------------

METHODS = '''
[composite.methods]
inputs = ["x: f32[N, D]", "ids: i64[K]"]
outputs = ["a: f32[N, 1]", "b: f32[N]", "c: f32[D]", "d: f32[N, D]", "e: f32[D, N]", "f: f64[N, D]",
           "g: i64[N]", "h: f32[N * D]", "k: f32[K, D]", "l: f32[N, D]", "t: f32"]
where = ["N >= 1", "D >= 1"]
body = """
a = x.sum(-1, keepdims=True) + x.mean(axis=1, keepdims=True)
b = x.max(1) - x.min(axis=-1) + x.prod(dim=1, keepdim=False)
c = x.sum(0)
d = (x - x.max(-1, keepdims=True)).exp().sqrt().clip(0.1, 0.9).maximum(x).tanh()
e = x.T.reshape(D, N) + x.transpose().reshape([D, -1]) + x.transpose(1, 0) + x.transpose((1, 0))
f = x.astype(f64).abs()
g = x.argmax(1)
h = x.reshape(-1)
k = x.take(ids, axis=0).T.reshape(D, K).transpose()
l = x.reshape(N, 1, D).squeeze(1).unsqueeze(0).flatten(0, 1)
t = x.max()
"""

[composite.index_form_methods]
inputs = ["x: f32[N, D]"]
outputs = ["y: f32[N]"]
body = "y[i] = sum[d](x[i, d].exp().sigmoid())"

[composite.method_named_like_a_tensor]
inputs = ["x: f32[N]", "sum: f32[N]", "exp: f32"]
outputs = ["y: f32[N]"]
body = "y = x.exp() * x.sum() + sum * exp"
'''


@pytest.fixture(scope="module")
def methods(compile_composites):
    return compile_composites(METHODS)


@pytest.mark.parametrize("n, d, k", [(1, 1, 1), (5, 7, 3), (13, 37, 9)])
def test_methods_mean_numpys_functions(methods, n: int, d: int, k: int) -> None:
    x = randn((n, d), seed=20)
    ids = np.random.default_rng(21).integers(0, n, size=k)
    a, b, c, d_, e, f, g, h, k_, l_, t = methods.methods(x, ids)
    assert_close(a, x.sum(-1, keepdims=True) + x.mean(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
    assert_close(b, x.max(1) - x.min(axis=-1) + x.prod(axis=1), rtol=1e-5, atol=1e-5)
    assert_close(c, x.sum(0), rtol=1e-5, atol=1e-5)
    want_d = np.tanh(np.maximum(np.clip(np.sqrt(np.exp(x - x.max(-1, keepdims=True))), 0.1, 0.9), x))
    assert_close(d_, want_d)
    assert_close(e, 4 * x.T)
    assert_close(f, np.abs(x.astype(np.float64)), dtype=np.float64)
    assert_close(g, x.argmax(1))
    assert_close(h, x.reshape(-1))
    assert_close(k_, x[ids])
    assert_close(l_, x)
    assert_close(t, x.max())


def test_methods_in_index_form_and_beside_tensors_of_their_name(methods) -> None:
    x = randn((4, 6), seed=22)
    assert_close(methods.index_form_methods(x), (1 / (1 + np.exp(-np.exp(x)))).sum(axis=1), rtol=1e-5)
    x, total, scale = randn((9,), seed=23), randn((9,), seed=24), np.float32(1.5)
    assert_close(methods.method_named_like_a_tensor(x, total, scale), np.exp(x) * x.sum() + total * scale, rtol=1e-5)


METHOD_LIST = (
    "; x.f(...) stands for f(x, ...) for the elementwise functions, the reductions, argmax, argmin, reshape, "
    "transpose, expand, squeeze, unsqueeze, flatten, take and astype (cast)"
)


@pytest.mark.parametrize(
    "body, want",
    [
        (
            "y = x.var()",
            "model.toml:4:15: error: unknown method '.var(...)'" + METHOD_LIST,
        ),
        (
            "y = x.expp()",
            "model.toml:4:15: error: unknown method '.expp(...)' (did you mean 'exp'?)" + METHOD_LIST,
        ),
        ("y = x.exp(2.0)", "model.toml:4:15: error: .exp(...) takes 0 arguments, got 1"),
        ("y = x.sum(0, 1)", "model.toml:4:15: error: .sum(...) takes 0 to 1 arguments, got 2"),
        (
            "y = x.max(dim=1)",
            "model.toml:4:19: error: torch's x.max(dim=...) gives values and indices; write x.max(axis=...) for "
            "the values or x.argmax(axis=...) for the indices",
        ),
        ("y = x.sum(1, axis=1)", "model.toml:4:22: error: the axis of .sum(...) is given twice"),
        ("y = x.sum(keepdim=True, keepdims=True)", "model.toml:4:33: error: the keepdims of .sum(...) is given twice"),
        (
            "y = np.exp(x)",
            "model.toml:4:13: error: 'np.exp(...)': the body's functions need no module; write exp(...)",
        ),
        (
            "y = x.where(x > 0.0, 0.0)",
            "model.toml:4:15: error: unknown method '.where(...)'" + METHOD_LIST,
        ),
        ("y = x.transpose(0, 0)", "model.toml:4:25: error: [0, 0] is not a permutation of the 2 axes"),
        ("y = x.sum", "model.toml:4:15: error: '.sum' is a method: call it, as in x.sum(...)"),
        ("y = x.shape", "model.toml:4:15: error: unknown attribute '.shape' (only '.T' and methods are supported)"),
        ("y = x.reshape(N, -1, -1)", "model.toml:4:23: error: reshape allows only one -1"),
    ],
)
def test_method_errors(tmp_path: Path, body: str, want: str) -> None:
    text = f'[composite.c]\ninputs = ["x: f32[N, D]"]\noutputs = ["y: f32[N, D]"]\nbody = "{body}"\n'
    assert error_of(tmp_path, text) == want


# ---- layers as a numpy or PyTorch user writes them ---------------------------------------------

LAYERS = '''
[composite.softmax_rows]
inputs = ["x: f32[N, D]"]
outputs = ["p: f32[N, D]"]
body = """
x = x - x.max(-1, keepdims=True)
p = x.exp()
p = p / p.sum(-1, keepdims=True)
"""

[composite.layer_norm]
inputs = ["x: f32[N, D]", "gamma: f32[D]", "beta: f32[D]"]
outputs = ["y: f32[N, D]"]
body = """
mu = x.mean(-1, keepdims=True)
x = x - mu
var = (x * x).mean(-1, keepdims=True)
y = x / (var + 1e-5).sqrt()
y = y * gamma + beta
"""

[composite.rms_norm]
inputs = ["x: f32[N, D]", "weight: f32[D]"]
outputs = ["x_out: f32[N, D]"]
body = """
h = x.astype(f64)
h = h * (h.pow(2.0).mean(dim=-1, keepdim=True) + 1e-6).rsqrt()
x_out = weight * h.astype(f32)
"""

[composite.group_norm]
inputs = ["x: f32[B, C, S]"]
outputs = ["x_out: f32[B, C, S]"]
where = ["C % 4 == 0"]
body = """
h = x.reshape(B, 4, -1)
h = h - h.mean(-1, keepdims=True)
h = h / (h.pow(2.0).mean(-1, keepdims=True) + 1e-5).sqrt()
x_out = h.reshape(B, C, S)
"""

[composite.logsumexp]
inputs = ["x: f32[N, D]"]
outputs = ["lse: f32[N]"]
body = """
m = x.max(-1)
lse = (x - m.reshape(N, 1)).exp().sum(-1).log() + m
"""

[composite.rotary_hf]
inputs = ["q: f32[T, D]", "cos: f32[T, D]", "sin: f32[T, D]"]
outputs = ["q_embed: f32[T, D]"]
where = ["D % 2 == 0"]
body = """
x1 = q[:, : D // 2]
x2 = q[:, D // 2 :]
rotated = concat([-x2, x1], axis=-1)
q_embed = (q * cos) + (rotated * sin)
"""
'''


@pytest.fixture(scope="module")
def layers(compile_composites):
    return compile_composites(LAYERS)


@pytest.mark.parametrize("n, d", [(1, 4), (6, 12), (13, 40)])
def test_layers_written_naturally(layers, n: int, d: int) -> None:
    x, gamma, beta = randn((n, d), seed=30), randn((d,), seed=31), randn((d,), seed=32)
    e = np.exp(x - x.max(-1, keepdims=True))
    assert_close(layers.softmax_rows(x), e / e.sum(-1, keepdims=True))
    centred = x - x.mean(-1, keepdims=True)
    normed = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5)
    assert_close(layers.layer_norm(x, gamma, beta), normed * gamma + beta, rtol=1e-4, atol=1e-5)
    h = x.astype(np.float64)
    assert_close(layers.rms_norm(x, gamma), gamma * (h / np.sqrt((h**2).mean(-1, keepdims=True) + 1e-6)))
    m = x.max(-1)
    assert_close(layers.logsumexp(x), np.log(np.exp(x - m[:, None]).sum(-1)) + m, rtol=1e-5, atol=1e-5)
    cos, sin = randn((n, d), seed=33), randn((n, d), seed=34)
    assert_close(layers.rotary_hf(x, cos, sin), x * cos + rotate(x) * sin)
    b, c, s = n, 8, d
    x3 = randn((b, c, s), seed=35)
    g = x3.reshape(b, 4, -1)
    g = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    assert_close(layers.group_norm(x3), g.reshape(b, c, s), rtol=1e-4, atol=1e-4)
