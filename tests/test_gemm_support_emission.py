"""A C file carries the gemm support code only for the drivers its kernels call (catenc/codegen/gemm.py):
the in-place weight driver and its micro-kernels only where a gemm reads A in place, the packed driver
only where one packs A, none of it without a gemm. Whatever is left out, the results are numpy's."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from conftest import assert_close, compile_text, randn, runtime

from catenc.driver import plan_file
from catenc.emit import render_source
from catenc.plan import Options

PACKED = """
[composite.mm]
inputs = ["a: f32[M, K]", "b: f32[K, N]"]
outputs = ["y: f32[M, N]"]
body = "y = a @ b"
"""

IN_PLACE = """
[composite.conv_static]
inputs = ["x: f32[2, 5, 9, 9]", "w: f32[13, 5, 3, 3]"]
outputs = ["y: f32[2, 13, 9, 9]"]
body = "y = conv2d(x, w, stride=1, padding=1, dilation=1)"
"""

NO_GEMM = """
[composite.twice]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = "y = x + x"
"""


def source(tmp_path: Path, text: str) -> str:
    """The C source of the composite file `text` (rendered only, not compiled)."""
    path = tmp_path / "m.toml"
    path.write_text(text)
    rt = runtime()
    options = Options(rt, config=rt.validate_config({}), opt="2")
    return render_source(plan_file(str(path), options).entries, "m", "m.toml", rt.renderer())


def defined(text: str) -> set[str]:
    """The gemm support functions the text defines."""
    return set(re.findall(r"^CATENC_GEMM_\w+ (?:int|void|int64_t) (catenc_gemm_\w+)\(", text, re.M))


def test_a_packed_gemm_gets_no_in_place_driver(tmp_path: Path) -> None:
    text = source(tmp_path, PACKED)
    assert "catenc_gemm_f32(" in text and "catenc_gemm_ukernel_f32(" in text
    assert not {f for f in defined(text) if f.startswith(("catenc_gemm_direct_a", "catenc_gemm_d"))}


def test_an_in_place_gemm_gets_no_packed_driver(tmp_path: Path) -> None:
    text = source(tmp_path, IN_PLACE)
    functions = defined(text)
    assert "catenc_gemm_direct_a_f32" in functions and "catenc_gemm_dukernel_f32" in functions
    assert "catenc_gemm_f32" not in functions


def test_no_gemm_no_support(tmp_path: Path) -> None:
    assert "catenc GEMM support" not in source(tmp_path, NO_GEMM)


def test_both_drivers_in_one_file(tmp_path: Path) -> None:
    """A file whose gemms call both drivers gets both, and each computes numpy's product."""
    text = PACKED + IN_PLACE
    assert {"catenc_gemm_f32", "catenc_gemm_direct_a_f32"} <= defined(source(tmp_path, text))
    lib = compile_text(tmp_path / "built", text)
    a, b = randn((7, 13), seed=1), randn((13, 37), seed=2)
    assert_close(lib["mm"](a, b), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    x, w = randn((2, 5, 9, 9), seed=3), randn((13, 5, 3, 3), seed=4)
    want = np.zeros((2, 13, 9, 9))
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    for r in range(3):
        for s in range(3):
            want += np.einsum("nchw,kc->nkhw", padded[:, :, r : r + 9, s : s + 9], w[:, :, r, s])
    assert_close(lib["conv_static"](x, w), want, rtol=1e-5, atol=1e-5)
