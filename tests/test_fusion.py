"""Fusion and workspace planning: what becomes one kernel, and where values live."""

import textwrap
from pathlib import Path

import pytest

from catenc.driver import plan_file
from catenc.plan import Options
from catenc.runtime.descriptor import load_runtime


def plan(tmp_path, body: str, inputs: list[str], outputs: list[str], opt: str = "2", extra: str = ""):
    text = f"""
    [composite.f]
    inputs = {inputs!r}
    outputs = {outputs!r}
    {extra}
    body = '''
    {textwrap.indent(textwrap.dedent(body).strip(), "    ").strip()}
    '''
    """
    path = tmp_path / "f.toml"
    path.write_text(textwrap.dedent(text))
    runtime = load_runtime("clang")
    (entry,) = plan_file(str(path), Options(runtime, runtime.validate_config({}), opt=opt)).entries
    return entry


def test_softmax_is_one_kernel_with_row_scalars(tmp_path):
    entry = plan(
        tmp_path,
        """
        e = exp(x - max(x, axis=-1, keepdims=True))
        y = e / sum(e, axis=-1, keepdims=True)
        """,
        ["x: f32[N, D]"],
        ["y: f32[N, D]"],
    )
    assert len(entry.kernels) == 1
    (kernel,) = entry.schedule.kernels
    assert len(kernel.scalars) == 2  # the row max and the row sum never touch memory
    assert str(entry.schedule.workspace_bytes) == "0"


def test_layernorm_is_one_kernel(tmp_path):
    entry = plan(
        tmp_path,
        """
        mu = mean(x, axis=-1, keepdims=True)
        xc = x - mu
        var = mean(xc * xc, axis=-1, keepdims=True)
        y = xc * rsqrt(var + 1e-5) * g + b
        """,
        ["x: f32[N, D]", "g: f32[D]", "b: f32[D]"],
        ["y: f32[N, D]"],
    )
    assert len(entry.kernels) == 1
    assert str(entry.schedule.workspace_bytes) == "0"


def test_matmul_fuses_its_epilogue(tmp_path):
    entry = plan(tmp_path, "y = relu(x @ w + b)", ["x: f32[M, K]", "w: f32[K, N]", "b: f32[N]"], ["y: f32[M, N]"])
    assert len(entry.kernels) == 1
    assert entry.kernels[0].fused == ("y",)
    # the product is never stored apart: the workspace holds only the packed panels
    (slot,) = entry.schedule.slots
    assert slot.buffers == (entry.schedule.kernels[0].pack,)
    assert entry.schedule.kernels[0].contraction.epilogue is not None


def test_elementwise_chain_with_broadcast_is_one_loop_nest(tmp_path):
    entry = plan(
        tmp_path, "a = x * s\nb = a + t\ny = gelu(b)", ["x: f32[M, N]", "s: f32[N]", "t: f32[M, 1]"], ["y: f32[M, N]"]
    )
    assert len(entry.kernels) == 1 and entry.kernels[0].fused == ("y",)


def test_no_fusion_at_O0_but_same_buffers_planned(tmp_path):
    entry = plan(
        tmp_path,
        "e = exp(x - max(x, axis=-1, keepdims=True))\ny = e / sum(e, axis=-1, keepdims=True)",
        ["x: f32[N, D]"],
        ["y: f32[N, D]"],
        opt="0",
    )
    assert len(entry.kernels) == 4
    assert all(k.reason == "fusion is off (-O0, or fuse-rows disabled)" for k in entry.schedule.kernels[1:])


def test_workspace_slots_are_reused_after_last_use(tmp_path):
    # a -> b -> c -> d -> y, each read across rows by a matmul so none can fuse or inline:
    # a is dead once b exists, so c can take a's slot, and d takes b's.
    entry = plan(
        tmp_path,
        """
        a = exp(x)
        b = exp(a @ a)
        c = exp(b @ b)
        d = exp(c @ c)
        y = d @ d
        """,
        ["x: f32[N, N]"],
        ["y: f32[N, N]"],
    )
    packs = {k.pack for k in entry.schedule.kernels}
    slots = [s for s in entry.schedule.slots if not packs & set(s.buffers)]
    assert sorted(s.buffers for s in slots) == [("a", "c"), ("b", "d")]


@pytest.mark.parametrize("opt", ["0", "2"])
def test_kernel_boundaries_say_why(tmp_path, opt):
    entry = plan(tmp_path, "a = exp(x)\ny = a @ a", ["x: f32[N, N]"], ["y: f32[N, N]"], opt=opt)
    kernels = entry.schedule.kernels
    assert len(kernels) == (3 if opt == "0" else 2)
    assert all(k.reason for k in kernels[1:])  # every boundary is explained (--debug 1 prints it)


def test_gpt2_attention_block_is_five_kernels_each_boundary_explained():
    """The benchmark's attention block: qkv projection, scores, softmax, p @ v, output projection."""
    path = Path(__file__).parent.parent / "bench" / "composites" / "gpt2_attention.toml"
    rt = load_runtime("clang")
    (entry,) = plan_file(str(path), Options(rt, config=rt.validate_config({}))).entries
    kernels = entry.schedule.kernels
    assert len(kernels) == 5
    assert [k.contraction is not None for k in kernels] == [True, True, False, True, True]
    assert all(k.reason for k in kernels[1:])
