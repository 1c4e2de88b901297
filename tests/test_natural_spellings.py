"""Natural Python spellings in a composite body (docs/language.md, sections 4 and 6), against numpy:
a name assigned again holds its newest value, as in Python; inputs, params and symbols may be named
like built-in functions; numpy's and PyTorch's method spellings `x.sum(axis=-1)`. Each error case
checks its exact FILE:LINE:COL diagnostic.
"""

from __future__ import annotations

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

[composite.shapes_between]
inputs = ["x: f32[N, 2*K]"]
outputs = ["y: f32[N, 2*K]"]
body = """
y = reshape(x, [N, 2, -1])
y = y - mean(y, axis=-1, keepdims=True)
y = reshape(y, [N, 2*K])
"""

[composite.tuples_rebind]
inputs = ["x: f32[N, D]"]
outputs = ["m: f32[N, 1]", "v: f32[N, 1]"]
body = """
m, v = moments(x)
m, v = moments(x - m + v)
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


def test_an_output_may_hold_other_shapes_before_its_last_assignment(reassign) -> None:
    x = randn((3, 8), seed=4)
    grouped = x.reshape(3, 2, -1)
    assert_close(reassign.shapes_between(x), (grouped - grouped.mean(axis=-1, keepdims=True)).reshape(3, 8))


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
            cwd=tmp_path, check=True, env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}, timeout=300,
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
            "model.toml:4:16: error: 'N' is a symbol, param or constant and cannot be assigned",
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
