"""--weights external (docs/abi.md, "External weights"): an entry takes its constants through ONE
`weights` argument, the data section of the safetensors file catenc writes; checked from Python on a
model with more constants than ctypes takes arguments, from the C program of docs/abi.md, through the
header's catenc_weights_data, and on OpenCL (PoCL)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from catenc.cli import main
from catenc.dtypes import DTYPES
from catenc.loader import load
from catenc.weights import weights_bytes
from tests.test_constants import expected, tensors, write_project
from tests.test_docs_examples import examples

COUNT = 1100  # constants: more than the 1024 arguments a ctypes function takes


def compile_ok(*args: str) -> None:
    result = CliRunner().invoke(main, ["compile", *args])
    assert result.exit_code == 0, result.output


def chain_model(path: Path) -> list[np.ndarray]:
    """An ONNX graph x + c0 + c1 + ... of COUNT tiny initializers; returns their values."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    values = [rng.standard_normal(2).astype(np.float32) for _ in range(COUNT)]
    inits = [numpy_helper.from_array(v, f"c{i}") for i, v in enumerate(values)]
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"t{i - 1}", f"c{i}"], [f"t{i}"]) for i in range(COUNT)]
    graph = helper.make_graph(
        nodes,
        "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(f"t{COUNT - 1}", TensorProto.FLOAT, [2])],
        inits,
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return values


@pytest.mark.parametrize("weights", ["external", "packed"])
def test_more_constants_than_ctypes_takes_arguments(tmp_path: Path, weights: str) -> None:
    """Packed, each of the 8-byte constants takes a 64-byte place of its own in the block."""
    values = chain_model(tmp_path / "chain.onnx")
    compile_ok(str(tmp_path / "chain.onnx"), "--weights", weights, "-O0", "-o", str(tmp_path / "out"))
    manifest = json.loads((tmp_path / "out/chain.manifest.json").read_text())
    (entry,) = manifest["entries"]
    role = "weights" if weights == "external" else "packed_weights"
    assert [a["role"] for a in entry["args"]] == ["input", role, "output", "workspace", "workspace_bytes"]
    assert len(entry["args"][1]["tensors"]) == COUNT and entry["args"][1]["bytes"] == COUNT * 8
    assert entry["args"][1].get("packed_bytes") == (None if weights == "external" else COUNT * 64)
    x = np.array([1.0, -2.0], np.float32)
    want = x.copy()
    for value in values:
        want = want + value
    np.testing.assert_allclose(load(tmp_path / "out")["net"](x), want, rtol=1e-5, atol=1e-5)


AFFINE_W = np.array([[1.0, -1.0], [0.5, 2.0], [-3.0, 0.25]], np.float32)
AFFINE_B = np.array([10.0, -20.0], np.float32)


@pytest.mark.parametrize("weights", ["external", "packed"])
def test_the_c_programs_of_abi_md_map_the_weights_file(tmp_path: Path, weights: str) -> None:
    """The program of "External weights" passes the mapped data; that of "Packed weights" packs it once
    into a block of its own, unmaps the file and calls twice."""
    (composite,) = [e for e in examples("abi.md", ("toml",)) if "[composite.affine]" in e.text]
    programs = [e for e in examples("abi.md", ("c",)) if '"affine.h"' in e.text]
    (program,) = [e for e in programs if ("affine_pack_weights(" in e.text) == (weights == "packed")]
    (tmp_path / "affine.toml").write_text(composite.text)
    tensors = {"w": (DTYPES["f32"], AFFINE_W), "b": (DTYPES["f32"], AFFINE_B)}
    (tmp_path / "affine.safetensors").write_bytes(weights_bytes(tensors))
    (tmp_path / "main.c").write_text(program.text)
    compile_ok(str(tmp_path / "affine.toml"), "--weights", weights, "-S", "-o", str(tmp_path / "out"))
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "a C compiler is required"
    build = [cc, "-std=c99", "-Wall", "-Werror", "-Iout", "main.c", "out/affine.c", "-lm", "-o", "main"]
    subprocess.run(build, check=True, cwd=tmp_path)
    done = subprocess.run(["./main", "out/affine.safetensors"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    x = np.array([[1, 2, 3], [-1, 0.5, 4]], np.float32)
    got = np.array([float(line) for line in done.stdout.split()], np.float32).reshape(-1, 2, 2)
    assert len(got) == (2 if weights == "packed" else 1)
    for call in got:
        np.testing.assert_allclose(call, x @ AFFINE_W + AFFINE_B, rtol=1e-6)


HELPER_CHECK = """\
#include <stdio.h>
#include <string.h>

#include "affine.h"

int main(void) {
    unsigned char file[80];
    memset(file, ' ', sizeof file);
    memcpy(file, "\\x48\\0\\0\\0\\0\\0\\0\\0", 8); /* a header of 72 bytes: the data at byte 80 */
    printf("%d %d %d %d\\n",
           catenc_weights_data(file, 80) == (const void*)(file + 80),
           catenc_weights_data(file, 79) == NULL, /* the header runs past the end */
           catenc_weights_data(file, 7) == NULL,  /* no header length */
           catenc_weights_data(NULL, 80) == NULL);
    memcpy(file, "\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff", 8);
    printf("%d\\n", catenc_weights_data(file, 80) == NULL); /* a length that would overflow */
    return 0;
}
"""


def test_the_header_helper_checks_the_header_length(tmp_path: Path) -> None:
    (composite,) = [e for e in examples("abi.md", ("toml",)) if "[composite.affine]" in e.text]
    (tmp_path / "affine.toml").write_text(composite.text)
    tensors = {"w": (DTYPES["f32"], AFFINE_W), "b": (DTYPES["f32"], AFFINE_B)}
    (tmp_path / "affine.safetensors").write_bytes(weights_bytes(tensors))
    compile_ok(str(tmp_path / "affine.toml"), "--weights", "external", "-S", "-o", str(tmp_path / "out"))
    (tmp_path / "check.c").write_text(HELPER_CHECK)
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    subprocess.run(
        [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-Iout", "check.c", "-o", "check"], check=True, cwd=tmp_path
    )
    done = subprocess.run(["./check"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1", "1", "1", "1", "1"]


@pytest.fixture(scope="module")
def net_project(tmp_path_factory) -> Path:
    return write_project(tmp_path_factory.mktemp("gpu_weights"))


def test_opencl_builds_read_the_constants_from_the_weights_data(net_project: Path) -> None:
    """The loader's OpenCL host (PoCL here) copies each constant from the mapped data to the device."""
    out = net_project.parent / "opencl"
    compile_ok(str(net_project), "--runtime", "opencl", "--weights", "external", "-o", str(out))
    x = np.random.default_rng(5).standard_normal((5, 4)).astype(np.float32)
    y, z, wc, hc = load(out)["net"](x)
    want_y, want_z = expected(x)
    np.testing.assert_allclose(y[:, 1:], want_y[:, 1:], rtol=1e-5, atol=1e-5)  # w, b, scale, mask, h, bb, k
    assert np.isnan(y[:, 0]).all()
    np.testing.assert_allclose(z, want_z, rtol=1e-6)  # table (f64); the f32 row sums are the device's
    assert wc.tobytes() == tensors()["w"][1].tobytes() and hc.tobytes() == tensors()["h"][1].tobytes()


@pytest.mark.parametrize("runtime", ["opencl", "cuda"])
def test_gpu_runtimes_refuse_packed_weights(net_project: Path, runtime: str) -> None:
    result = CliRunner().invoke(
        main,
        ["compile", str(net_project), "--runtime", runtime, "--weights", "packed", "-o", str(net_project.parent / "g")],
    )  # a bad combination: a diagnostic at the composite, nothing written
    assert result.exit_code == 1
    assert "net.toml:1:12: error: 'net': --weights packed packs the constants for the host's gemm" in result.output
    assert "compile with --weights external" in result.output
    out = net_project.parent / "g"
    assert not out.exists() or not any(out.iterdir())


def test_cuda_entries_bind_the_constants_in_one_device_copy(net_project: Path) -> None:
    """nvcc builds the host entry that points each constant into `weights` (device memory) and
    copies the scalar one back on the stream before the launches."""
    out = net_project.parent / "cuda"
    compile_ok(str(net_project), "--runtime", "cuda", "--weights", "external", "-o", str(out))
    entry = json.loads((out / "net.manifest.json").read_text())["entries"][0]
    assert entry["prototype"].startswith("int net(const float* x, const void* weights, float* y, ")
    source = (out / "net.cu").read_text()
    assert "const float* w = (const float*)((const unsigned char*)weights + 40);" in source
    assert "cudaMemcpyAsync(&scale, (const unsigned char*)weights + 100, sizeof scale, cudaMemcpyDeviceToHost" in source
    assert (out / "libnet.so").is_file()
