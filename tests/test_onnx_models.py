"""Real networks through the ONNX import: the tiny variants of bench/onnx_models.py (ResNet-18,
MobileNetV2, a 4-layer BERT-style encoder, GPT-2), exported by torch.onnx.export, compiled by catenc
and compared with onnxruntime on the same inputs (issue 18, item 5).

onnxruntime is the reference here, not an optional tool: a test fails when it is missing (the dev
extra installs it). Tolerance: f32 against f32, both accumulating in their own order, so
max|catenc - onnxruntime| <= RTOL * |onnxruntime| + ATOL * max|onnxruntime|.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from conftest import compile_file

from catenc.loader import load

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import onnx_models  # noqa: E402  (bench/onnx_models.py)

RTOL, ATOL = 1e-4, 1e-5


def ort_run(path: Path, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The model's outputs by onnxruntime on the CPU (one thread: deterministic)."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def assert_matches(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL * float(np.max(np.abs(want))), err_msg=what)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("onnx_models")


@pytest.mark.parametrize("name", list(onnx_models.MODELS))
def test_tiny_model_matches_onnxruntime(tmp: Path, name: str) -> None:
    """Exported with fixed shapes (BatchNorm folded into the convolutions, as the exporter does by default)."""
    model = onnx_models.build(name, "tiny")
    path = onnx_models.export(model, tmp / f"{name}.onnx")
    library = compile_file(path, tmp / name)
    feed = dict(zip(model.input_names, model.inputs))
    got = library[model.name](*model.inputs)
    for g, w, output in zip(got if isinstance(got, tuple) else (got,), ort_run(path, feed), model.output_names):
        assert_matches(g, w, f"{name} {output}")


@pytest.fixture(scope="module")
def resnet_dynamic(tmp: Path) -> tuple[onnx_models.Model, Path]:
    """The tiny ResNet with a named batch dim (dim_param 'batch') and its BatchNormalization nodes kept."""
    model = onnx_models.build("resnet18", "tiny")
    return model, onnx_models.export(model, tmp / "resnet_dynamic.onnx", dynamic=True, keep_batchnorm=True)


def images(batch: int) -> np.ndarray:
    return np.random.default_rng(batch).standard_normal((batch, 3, 32, 32), dtype=np.float32)


def test_dynamic_batch_stays_a_symbol(tmp: Path, resnet_dynamic) -> None:
    model, path = resnet_dynamic
    entry = compile_file(path, tmp / "free")[model.name]
    assert entry.dims == ["batch"]
    for batch in (1, 3):
        x = images(batch)
        assert_matches(entry(x), ort_run(path, {"image": x})[0], f"batch {batch}")


def test_dynamic_batch_pinned_by_define(tmp: Path, resnet_dynamic) -> None:
    """`catenc compile model.onnx -D batch=2`: the symbol is specialized; the entry takes batch 2 only."""
    model, path = resnet_dynamic
    out = tmp / "pinned"
    command = [sys.executable, "-m", "catenc", "compile", str(path), "-o", str(out), "-D", "batch=2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    entry = load(out / f"{path.stem}.manifest.json")[model.name]
    assert entry.specialized == {"batch": 2} and entry.dims == []
    x = images(2)
    assert_matches(entry(x), ort_run(path, {"image": x})[0], "batch 2 pinned")


@pytest.mark.parametrize("name", ["bert4", "gpt2_small"])
def test_dynamic_batch_and_sequence(tmp: Path, name: str) -> None:
    """Both axes named: the exporter's Shape -> Gather -> Concat -> Reshape chains, the position Range
    and (GPT-2) the causal mask sliced to [:seq, :seq] become expressions in the symbols, so one library
    runs any batch and sequence length."""
    model = onnx_models.build(name, "tiny")
    path = onnx_models.export(model, tmp / f"{name}_dynamic.onnx", dynamic=True)
    entry = compile_file(path, tmp / f"{name}_dynamic")[model.name]
    assert entry.dims == ["batch", "seq"]
    for batch, seq in ((1, 12), (2, 5), (3, 16)):
        feed = {"input_ids": np.random.default_rng(seq).integers(0, 97, (batch, seq), dtype=np.int64)}
        if name == "bert4":
            feed["attention_mask"] = np.ones((batch, seq), dtype=np.int64)
            feed["attention_mask"][:, seq - seq // 3 :] = 0
        got = entry(*feed.values())
        assert_matches(got, ort_run(path, feed)[0], f"{name} batch {batch} seq {seq}")


@pytest.mark.parametrize("name", ["bert4", "gpt2_small"])
def test_opset_20_gelu_node(tmp: Path, name: str) -> None:
    """At opset 20 the exporter writes GELU as a Gelu node (approximate 'none' for BERT, 'tanh' for GPT-2)."""
    model = onnx_models.build(name, "tiny")
    path = onnx_models.export(model, tmp / f"{name}_opset20.onnx", opset=20)
    assert any(node.op_type == "Gelu" for node in onnx.load(str(path)).graph.node)
    got = compile_file(path, tmp / f"{name}_opset20")[model.name](*model.inputs)
    assert_matches(got, ort_run(path, dict(zip(model.input_names, model.inputs)))[0], f"{name} opset 20")
