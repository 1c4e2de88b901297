"""A gemm's constant B packed once (catenc/codegen/prepack.py): at compile time when baked, at load
with --weights packed (codegen/pack_weights.py, into the block NAME_pack_weights fills). The C has
no B packing function for it, the call passes the panels stored after the constant's values, and
the results are bit-identical to --weights external (which packs B on every call) and close to
numpy, at odd sizes (N not a multiple of NR, K past one k-slice), on 1, 2 and 3 threads, in a kernel
function shared by layers and in one shared with a product whose B is an argument. A packed build
packs whichever file of the layout it is given, and its pack function refuses a block too small or
misaligned."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import randn
from onnx import TensorProto, helper, numpy_helper

from catenc.build import BuildRequest, build
from catenc.driver import plan_file
from catenc.dtypes import DTYPES
from catenc.loader import aligned_buffer, load
from catenc.plan import Options, WeightsMode
from catenc.runtime.descriptor import load_runtime
from catenc.runtime.weights_data import WeightsData
from catenc.weights import weights_bytes

K, N, NT, KT = 1100, 77, 45, 700  # K > KC = 512: several k-slices
FORCE_THREADS = "-DCATENC_GEMM_PARALLEL_FLOPS=0 -DCATENC_GEMM_FLOPS_PER_THREAD=1"

NET = f"""
[composite.net]
inputs = ["x: f32[M, {K}]", "v: f32[{K}, {N}]"]
outputs = ["y: f32[M, {N}]", "z: f32[M, {NT}]", "u: f32[M, {N}]", "s: f32[{N}]"]
weights = "net.safetensors"
constants = ["w: f32[{K}, {N}]", "wt: f32[{NT}, {K}]", "b: f32[{N}]"]
body = '''
y = relu(x @ w + b)
z = x @ transpose(wt)
u = x @ v
s = sum(w, axis=0)
'''

[composite.layers]
inputs = ["x: f32[M, {K}]"]
outputs = ["y: f32[M, {N}]", "z: f32[M, {N}]"]
weights = "net.safetensors"
constants = ["w: f32[{K}, {N}]", "w2: f32[{K}, {N}]"]
body = '''
y = x @ w
z = x @ w2
'''

[composite.mixed]
inputs = ["x: f32[M, {K}]", "v: f32[{K}, {N}]"]
outputs = ["y: f32[M, {N}]", "z: f32[M, {N}]"]
weights = "net.safetensors"
constants = ["w: f32[{K}, {N}]"]
body = '''
y = x @ w
z = x @ v
'''
"""


def tensors() -> dict[str, np.ndarray]:
    return {
        "w": randn((K, N), seed=1),
        "wt": randn((NT, K), seed=2),
        "b": randn((N,), seed=3),
        "w2": randn((K, N), seed=4),
    }


def compile_model(path: Path, out: Path, weights: str) -> tuple[str, object]:
    rt = load_runtime("clang")
    options = Options(rt, config=rt.validate_config({"CFLAGS": FORCE_THREADS}), weights=WeightsMode(weights))
    written = build(
        plan_file(str(path), options), options, BuildRequest(str(path), str(out), ("c", "h", "manifest", "so"))
    )
    return Path(written["c"]).read_text(), load(written["manifest"])


@pytest.fixture(scope="module")
def composite(tmp_path_factory):
    directory = tmp_path_factory.mktemp("prepacked")
    values = {name: (DTYPES["f32"], v) for name, v in tensors().items()}
    (directory / "net.safetensors").write_bytes(weights_bytes(values))
    (directory / "net.toml").write_text(NET)
    return {w: compile_model(directory / "net.toml", directory / w, w) for w in ("baked", "external", "packed")}


def body(source: str, entry: str) -> str:
    """The part of a source after its gemm support: the entries' kernels and functions."""
    return source.split(f"---- {entry} ----")[1]


def test_baked_b_operands_have_no_packing_function_and_pass_their_panels(composite) -> None:
    baked, _ = composite["baked"]
    external, _ = composite["external"]
    # net: x @ w reads panels after w's values (sum(w) reads them too); x @ transpose(wt) reads wt's
    # panels, all its array holds (nothing else reads wt); x @ v packs v
    assert re.search(r"catenc_gemm_call_f32\(M, 77LL, 1100LL, 0, 0, w \+ [1-9]\d*LL, \w+_pack_a, 0, ", baked)
    assert re.search(r"catenc_gemm_call_f32\(M, 45LL, 1100LL, 0, 0, wt \+ 0LL, \w+_pack_a, 0, ", baked)
    assert re.search(r"catenc_gemm_call_f32\(M, 77LL, 1100LL, 0, 0, 0, (\w+)_pack_a, \1_pack_b, ", baked)
    assert len(re.findall(r"static void net_k\d+_g\d+_pack_b\(", baked)) == 1
    assert len(re.findall(r"static void net_k\d+_g\d+_pack_b\(", external)) == 3
    assert "then its gemm B panels" in baked and "then its gemm B panels" not in external
    wt = re.search(r"constant wt: f32\[45, 1100\], as its gemm B panels only \*/\n.*? bytes\[(\d+)\]", baked)
    assert wt is not None and int(wt[1]) == 4 * 1100 * 64  # one panel of 64 columns, and no values


def test_packed_weights_read_the_panels_a_baked_build_holds(composite) -> None:
    """The kernels of a packed build are the baked build's: the same calls, the panels at the same
    places past each constant's start, only the constants bound to the block instead of arrays."""
    baked, _ = composite["baked"]
    packed, library = composite["packed"]
    calls = re.compile(r"catenc_gemm_call_f32\(M, [^;]*;")
    assert calls.findall(body(packed, "net")) == calls.findall(body(baked, "net"))
    assert len(re.findall(r"static void net_k\d+_g\d+_pack_b\(", packed)) == 1  # x @ v only
    assert re.search(r"const float\* w = \(const float\*\)\(\(const unsigned char\*\)packed_weights \+ \d+\);", packed)
    header = (library.path.parent / "net.h").read_text()
    assert "int net(const float* x, const float* v, const void* packed_weights, float* y," in header
    assert "size_t net_packed_weights_bytes(void);" in header
    assert "int net_pack_weights(const void* weights, void* packed_weights, size_t packed_weights_bytes);" in header
    (arg,) = [a for a in library.entries["net"].spec["args"] if a["role"] == "packed_weights"]
    # w: values (sum(w) reads them), then panels; wt: panels of 64 columns alone; b: values; 64-byte aligned
    w_bytes = 4 * (K * N + K * 128)
    assert arg["packed_bytes"] == -(-w_bytes // 64) * 64 + 4 * K * 64 + -(-4 * N // 64) * 64
    assert arg["pack_symbol"] == "net_pack_weights" and [t["name"] for t in arg["tensors"]] == ["w", "wt", "b"]


def test_a_packed_build_packs_the_file_it_is_given(composite, tmp_path: Path) -> None:
    """Other values of the same layout, through load(weights=...): the results are theirs."""
    other = {name: (DTYPES["f32"], v * 2 - 1) for name, v in tensors().items()}
    (tmp_path / "other.safetensors").write_bytes(weights_bytes(other))
    library = composite["packed"][1]
    entry = load(library.manifest_path, weights=tmp_path / "other.safetensors").entries["net"]
    x, v = randn((7, K), seed=13), randn((K, N), seed=14)
    y, z, _, s = entry(x, v)
    w = {name: t.astype(np.float64) for name, (_, t) in other.items()}
    np.testing.assert_allclose(y, np.maximum(x @ w["w"] + w["b"], 0), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(z, x @ w["wt"].T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(s, w["w"].sum(axis=0), rtol=1e-4, atol=1e-3)


def test_the_pack_function_refuses_a_block_too_small_or_misaligned(composite) -> None:
    library = composite["packed"][1]
    cdll = ctypes.CDLL(str(library.path))
    size = cdll.net_packed_weights_bytes
    size.restype = ctypes.c_size_t
    pack = cdll.net_pack_weights
    pack.argtypes, pack.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int
    need = size()
    mapped = WeightsData(library.manifest_path.parent / "net.safetensors", [])
    data = mapped.address()  # valid while `mapped` lives
    block = aligned_buffer(need + 64)
    assert pack(data, block.ctypes.data, need - 1) == 2  # CATENC_E_WORKSPACE
    assert pack(data, block.ctypes.data + 4, need) == 2
    assert pack(None, block.ctypes.data, need) == 2
    assert pack(data, block.ctypes.data, need) == 0


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("m", [13, 50])
def test_prepacked_results_equal_packing_per_call(composite, threads: int, m: int) -> None:
    t = tensors()
    x, v = randn((m, K), seed=5), randn((K, N), seed=6)
    results = {}
    for weights in ("baked", "external", "packed"):
        entry = composite[weights][1].entries["net"]
        entry.set_num_threads(threads)
        results[weights] = entry(x, v)
    for mode in ("external", "packed"):
        for got, want in zip(results["baked"], results[mode], strict=True):
            assert got.tobytes() == want.tobytes()
    y, z, u, s = results["baked"]
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, np.maximum(x64 @ t["w"] + t["b"], 0), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(z, x64 @ t["wt"].T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(u, x64 @ v, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(s, t["w"].astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("threads", [1, 3])
def test_a_shared_kernel_reads_panels_only_when_every_caller_has_them(composite, threads: int) -> None:
    baked, library = composite["baked"]
    t = tensors()
    # layers: both products call one function, each with its own constant's panels
    assert "layers_k0(x, w2, z" in baked
    assert re.search(r"catenc_gemm_call_f32\(M, 77LL, 1100LL, 0, 0, w \+ \d+LL, layers_k0_g0_pack_a, 0, ", baked)
    # mixed: its function also multiplies by an argument, so it packs B on every call
    assert "mixed_k0(x, v, z" in baked
    assert re.search(r"catenc_gemm_call_f32\(M, 77LL, 1100LL, 0, 0, 0, mixed_k0_g0_pack_a, mixed_k0_g0_pack_b", baked)
    x, v = randn((9, K), seed=7), randn((K, N), seed=8)
    layers, mixed = library.entries["layers"], library.entries["mixed"]
    for entry in (layers, mixed):
        entry.set_num_threads(threads)
    y, z = layers(x)
    np.testing.assert_allclose(y, x.astype(np.float64) @ t["w"], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(z, x.astype(np.float64) @ t["w2"], rtol=1e-4, atol=1e-3)
    y, z = mixed(x, v)
    np.testing.assert_allclose(y, x.astype(np.float64) @ t["w"], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(z, x.astype(np.float64) @ v, rtol=1e-4, atol=1e-3)


def onnx_model(directory: Path) -> Path:
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Gemm", ["x", "wg", "bg"], ["y"], transB=1),
        helper.make_node("MatMul", ["x", "wm"], ["z"]),
    ]
    initializers = [
        numpy_helper.from_array(randn((NT, KT), seed=9), "wg"),
        numpy_helper.from_array(randn((NT,), seed=10), "bg"),
        numpy_helper.from_array(randn((KT, N), seed=11), "wm"),
    ]
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("x", f, ["batch", KT])],
        [helper.make_tensor_value_info("y", f, ["batch", NT]), helper.make_tensor_value_info("z", f, ["batch", N])],
        initializer=initializers,
    )
    path = directory / "classifier.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_onnx_gemm_and_matmul_by_initializers_are_prepacked(tmp_path: Path, threads: int) -> None:
    path = onnx_model(tmp_path)
    built = {w: compile_model(path, tmp_path / w, w) for w in ("baked", "external")}
    baked, external = built["baked"][0], built["external"][0]
    assert not re.search(r"_pack_b\(", baked.split("catenc_gemm_call_f32(int64_t")[1].split("int classifier(")[0])
    assert len(re.findall(r"static void \w+_pack_b\(", external)) == 2
    model = onnx.load(str(path))
    w = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer}
    x = randn((21, KT), seed=12)
    results = {}
    for weights, (_, library) in built.items():
        entry = library.entries["classifier"]
        entry.set_num_threads(threads)
        results[weights] = entry(x)
    for got, want in zip(results["baked"], results["external"], strict=True):
        assert got.tobytes() == want.tobytes()
    y, z = results["baked"]
    np.testing.assert_allclose(y, x @ w["wg"].T + w["bg"], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(z, x @ w["wm"], rtol=1e-4, atol=1e-3)
