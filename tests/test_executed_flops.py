"""A kernel's counted flops against what its final loop nest executes (catenc/lower/count.py,
counted independently of catenc/ir/cost.py): exact on small cases, within 10% on every kernel of
the bench networks and the samples (issue 26, item 7)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from catenc import profile
from catenc.driver import plan_file
from catenc.lower.count import executed_ops
from catenc.plan import EntryPlan, Options
from catenc.schedule.kernels import kernel_cost
from catenc.testing.check import entry_env, entry_sizes
from tests.conftest import runtime
from tests.test_onnx_import import make_model, save, tensor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import onnx_models  # noqa: E402  (bench/onnx_models.py, with bench/paper_models.py)

F = TensorProto.FLOAT
TOLERANCE = 0.10
SAMPLES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "samples").glob("*.toml")) + ["samples/mlp.yaml"]


def _plans(path: Path | str, opt: str = "2") -> tuple[EntryPlan, ...]:
    return plan_file(str(path), Options(runtime("clang"), opt=opt)).entries


def _plan(path: Path | str, opt: str = "2") -> EntryPlan:
    (entry,) = _plans(path, opt)
    return entry


def _counts(entry: EntryPlan):
    """(kernel, its LoopKernel.flops, its kernel_cost flops, what it executes) at its test sizes."""
    env = entry_env(entry, entry_sizes(entry, {}))
    buffers = {b.name: b for b in entry.schedule.graph.buffers}
    for group, kernel in zip(entry.schedule.kernels, entry.kernels):
        cost = kernel_cost(entry.schedule.graph, group).flops.evaluate(env)
        yield kernel.name, kernel.flops.evaluate(env), cost, executed_ops(kernel, env, buffers)


def _relu_pool(tmp_path: Path) -> Path:
    """A ReLU fused into a padded 3x3 stride-2 average pool over 6 channels of 16x16."""
    n = helper.make_node
    nodes = [
        n("Relu", ["x"], ["r"]),
        n("AveragePool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
    ]
    return save(make_model(nodes, [tensor("x", F, [1, 6, 16, 16])], [tensor("y", F, None)], []), tmp_path, "pool")


@pytest.mark.parametrize("opt", ["1", "2"])
def test_a_fused_producer_under_a_padding_guard_counts_at_the_taps_inside(tmp_path: Path, opt: str) -> None:
    """Per channel, 8x8 outputs of 9 taps: 576 adds, 64 divisions, and the ReLU at the 23*23
    taps inside the image (not at all 576: the cost model counted both sides of the guard)."""
    entry = _plan(_relu_pool(tmp_path), opt)
    ((_, flops, cost, executed),) = _counts(entry)
    assert executed.ops == flops == cost == 6 * (576 + 23 * 23 + 64)
    assert executed.lane_combines == 0


def test_a_gemm_counts_its_epilogue_and_its_operands_once_per_element(tmp_path: Path) -> None:
    """y = relu(relu(x) @ w + b) with x 16x24, w 24x32: 2*16*32*24 multiply-adds, the ReLU of x
    once per element it packs (16*24), the bias and ReLU once per output (2*16*32)."""
    n = helper.make_node
    nodes = [
        n("Relu", ["x"], ["r"]),
        n("MatMul", ["r", "w"], ["m"]),
        n("Add", ["m", "b"], ["s"]),
        n("Relu", ["s"], ["y"]),
    ]
    inputs = [tensor("x", F, [16, 24]), tensor("w", F, [24, 32]), tensor("b", F, [32])]
    entry = _plan(save(make_model(nodes, inputs, [tensor("y", F, None)], []), tmp_path, "gemm"))
    want = 2 * 16 * 32 * 24 + 16 * 24 + 2 * 16 * 32
    gemms = [(flops, cost, executed.ops) for _, flops, cost, executed in _counts(entry) if flops > 16 * 32 * 24]
    assert gemms == [(want, want, want)]


NETWORKS = list(onnx_models.MODELS)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("networks")


@pytest.mark.parametrize("name", NETWORKS)
def test_every_kernel_of_a_network_counts_what_it_executes(exported: Path, name: str) -> None:
    path = onnx_models.export(onnx_models.build(name, "tiny"), exported / f"{name}.onnx")
    _assert_within(_plan(path))


# softmax, layernorm and attention reuse a reduced value for their stores (vectorize.py's
# reduced values reused): the graph counts exp(x - max) twice per element, the loops once.
REUSED = {"samples/softmax.toml", "samples/layernorm.toml", "samples/attention.toml"}


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s not in REUSED])
def test_every_kernel_of_a_sample_counts_what_it_executes(sample: str) -> None:
    for entry in _plans(ROOT / sample):
        _assert_within(entry)


def _assert_within(entry: EntryPlan) -> None:
    off = [
        f"{name}: LoopKernel.flops {flops}, kernel_cost (profile, tuner, manifest) {cost}, executed {executed.ops}"
        for name, flops, cost, executed in _counts(entry)
        if max(abs(flops - executed.ops), abs(cost - executed.ops)) > TOLERANCE * executed.ops
    ]
    assert not off, "\n".join(off)


def test_the_profile_table_marks_a_rate_above_the_peak() -> None:
    """A kernel faster than the FMA peak allows is marked and explained, never shown bare."""
    peaks = {"fma_gflops": 100.0, "triad_gbs": 10.0, "source": "given"}
    row = {"name": "k0", "calls": 1, "seconds": 1e-6, "computes": ["y"], "ops": ["add"]}
    rates = [profile.rates_of(flops, 1_000, 1e-6, profile.Peaks(100.0, 10.0)) for flops in (50_000, 150_000)]
    entry = {"entry": "e", "sizes": {}, "seconds": 1e-5, "kernels_seconds": 2e-6, "kernels_fastest_seconds": 2e-6}
    report = {"file": "f", "runtime": "clang", "compiler": "cc", "opt": "2", "runs": 1, "peaks": peaks}
    report["entries"] = [{**entry, "kernels": [{**row, **rates[0]}, {**row, "name": "k1", **rates[1]}]}]
    text = profile.format_report(report)
    assert " 50.0 " in text and "150.0!" in text and profile.OVER_PEAK_NOTE in text
