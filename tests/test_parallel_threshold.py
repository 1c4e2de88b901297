"""OpenMP by default, with a size threshold: small kernels stay on the calling thread.

The clang runtime builds with OpenMP unless `--config OMP=0`; the entry's parallel region and
each kernel's share of its row loop carry the condition `work >= threshold`, whose work is the
kernel's flops plus stores, so a call too small to pay for waking threads runs serially, and
results never depend on which.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import compile_text, randn

from catenc.diagnostics import CatencError
from catenc.runtime.descriptor import load_runtime
from catenc.schedule.kernels import PARALLEL_WORK

SOURCE = """
[composite.scale_rows]
inputs = ["x: f32[N, D]", "s: f32[D]"]
outputs = ["y: f32[N, D]"]
body = "y = x * s + 1.0"
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    directory = tmp_path_factory.mktemp("threshold")
    lib = compile_text(directory, SOURCE, name="rows")
    return lib, (directory / "out_rows_O2" / "rows.c").read_text()


def test_openmp_is_the_default(built):
    lib, _ = built
    assert lib.manifest["runtime"]["config"]["OMP"] == "1"
    assert "-fopenmp" in lib.manifest["build"]["commands"][0]


def test_parallel_loop_has_a_size_threshold(built):
    _, source = built
    threshold = PARALLEL_WORK
    # the entry opens its team only when the kernel is worth threads, and the kernel shares its rows
    # among the team, in chunks, on the same condition
    assert f"#pragma omp parallel if((3LL*D*N) >= {threshold})" in source
    assert f"catenc_loop_chunks(catenc_extent, (3LL*D*N) >= {threshold})" in source
    # the row body is a function of its own (restrict pointers survive OpenMP outlining)
    assert "static void scale_rows_k0_row0(" in source


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (1000, 300)])
def test_serial_and_parallel_calls_agree_with_numpy(built, shape):
    lib, _ = built
    x, s = randn(shape, seed=1), randn(shape[1:], seed=2)
    np.testing.assert_array_equal(lib.scale_rows(x, s), x * s + np.float32(1.0))


def test_openmp_can_be_turned_off(tmp_path):
    lib = compile_text(tmp_path, SOURCE, name="serial", config={"OMP": "0"})
    assert "-fopenmp" not in lib.manifest["build"]["commands"][0]
    source = (tmp_path / "out_serial_O2" / "serial.c").read_text()
    assert "#pragma omp parallel" not in source
    x, s = randn((7, 9), seed=3), randn((9,), seed=4)
    np.testing.assert_array_equal(lib.scale_rows(x, s), x * s + np.float32(1.0))


def test_without_an_openmp_runtime_the_default_is_serial(tmp_path, monkeypatch):
    """A compiler that cannot build OpenMP code (clang without libomp): OMP defaults to 0,
    and an explicit OMP=1 is an error that says what to install."""
    wrapper = tmp_path / "cc-no-omp"
    wrapper.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && exit 1; done\nexec cc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    rt = load_runtime("clang")
    assert rt.validate_config({})["OMP"] == "0"
    with pytest.raises(CatencError, match="libomp-dev"):
        rt.validate_config({"OMP": "1"})
