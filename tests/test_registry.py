"""The op registry (catenc/registry.py): its declarations are whole and consistent, and the
stages' tables come from it."""

from __future__ import annotations

import json
import re

import jinja2
import numpy as np
import pytest

from catenc import registry
from catenc.codegen.c import CRenderer
from catenc.codegen.gpu import CudaRenderer, OpenCLRenderer
from catenc.dtypes import DTYPES, F32, F64
from catenc.frontend import calls, operators
from catenc.ir import nodes, passes
from catenc.ir.build import apply
from catenc.ir.nodes import Binary, Const, Load, Unary, format_value
from catenc.testing import reference
from catenc.testing.coverage import library_ops

I32 = DTYPES["i32"]


def test_every_op_is_declared_once_with_known_facts():
    names = [op.name for op in registry.OPS.values()]
    assert len(names) == len(set(names))
    for op in registry.OPS.values():
        assert isinstance(op.rule, registry.Rule) and op.rule in registry.RULES, op.name
        assert isinstance(op.cost, registry.OpCost), op.name
        assert isinstance(op.kind, registry.OpKind), op.name
        assert op.kind is not registry.OpKind.IR or op.primitive, op.name
        if op.kind is not registry.OpKind.IR and op.rule is not registry.Rule.CAST:
            assert op.numpy is not None, f"{op.name}: no numpy meaning for the reference"
    assert set(registry.RULES) == set(registry.Rule)
    assert all(isinstance(r.cost, registry.OpCost) for r in registry.REDUCTION_OPS.values())


def test_declarations_name_every_field():
    with pytest.raises(TypeError):
        registry.Op("abs", 1, registry.Rule.NUMERIC, registry.OpCost.CHEAP)
    with pytest.raises(TypeError):
        registry.Reduction("sum", np.sum)
    with pytest.raises(TypeError):
        registry.Row("abs", "y = abs(x)", "np.abs(x)", registry.NUMBERS)
    with pytest.raises(TypeError):
        registry.Spelling("fabs{s}({0})")
    row = registry.Row(name="abs", body="y = abs(x)", reference="np.abs(x)", dtypes=registry.NUMBERS)
    assert registry.OPS["abs"].rows == (row,)


def test_closed_sets_read_and_print_as_their_names():
    """Members compare equal to, format as and serialise to the strings they replace."""
    op = registry.OPS["exp"]
    assert op.cost == "transcendental" and op.kind == "function" and op.rule == "float"
    assert f"{op.rule}/{op.cost}" == "float/transcendental" and str(op.kind) == "function"
    assert json.dumps([op.rule, op.cost, op.kind]) == '["float", "transcendental", "function"]'
    assert registry.COSTS == ("cheap", "divide", "transcendental", "reduction")
    assert registry.KINDS == ("function", "operator", "ir")


def test_lowerings_name_only_declared_ops_and_every_non_primitive_lowers():
    built_here = {"sign", "where", "cast", "clip"}  # ir/build.py (clip: the checker) builds their nodes
    for op in registry.OPS.values():
        if op.kind is not registry.OpKind.IR and not op.primitive and op.name not in built_here:
            assert op.name in registry.LOWERINGS, op.name

    def ops_in(tree):
        if tree[0] == "op":
            yield tree[1]
            for t in tree[2]:
                yield from ops_in(t)

    for name, tree in registry.LOWERINGS.items():
        for used in ops_in(tree):
            assert used in registry.OPS and (registry.OPS[used].primitive or used in registry.LOWERINGS), (name, used)


@pytest.mark.parametrize("text", ["exp(", "exp(x", "nope(x)", "exp(x) y", "exp(x,)"])
def test_a_malformed_lowering_is_refused(text):
    with pytest.raises(ValueError, match="lowering"):
        registry.parse_lowering(text)


def test_vector_routines_are_defined_in_the_template():
    env = jinja2.Environment(loader=jinja2.PackageLoader("catenc.codegen", "templates"))
    text = env.get_template("vecmath.c.j2").render()
    for op in registry.OPS.values():
        if op.vector_math:
            assert re.search(rf"CATENC_VMATH float {op.c.vector_f32}\(float x\)", text), op.name


def test_the_stages_read_their_tables_from_the_registry():
    assert calls.ELEMENTWISE is registry.ELEMENTWISE and calls.ARITY is registry.ARITY
    assert operators.UNARY_FLOAT is registry.UNARY_FLOAT
    assert nodes.UNARY_OPS is registry.UNARY_OPS and nodes.BINARY_OPS is registry.BINARY_OPS
    assert passes.EXPENSIVE_OPS is registry.EXPENSIVE_OPS
    assert CRenderer.unary_float == registry.unary_spellings("float")
    assert CRenderer.binary_int == registry.binary_spellings("int")
    assert CRenderer.vector_math_f32 == registry.vector_math_f32()
    assert CRenderer.vector_math_f32["exp"] == "catenc_vexp_f32({0})"
    assert CudaRenderer.unary_float == registry.unary_spellings("float", "cuda")
    assert OpenCLRenderer.binary_float == registry.binary_spellings("float", "opencl")
    rows = {comp.name for family, comp, _ in library_ops((), True) if family == "primitives"}
    assert {f"prim_{row.name}" for row in registry.ROWS} <= rows


def test_expensive_ops_are_the_primitive_transcendentals_and_divisions():
    assert {"exp", "erf", "div", "recip", "sqrt", "pow"} <= registry.EXPENSIVE_OPS
    assert registry.EXPENSIVE_OPS.isdisjoint({"add", "floor", "abs", "max", "gelu", "sigmoid"})


def test_a_lowering_builds_the_nodes_it_spells():
    x = Load(F32, "x", ())
    got = apply("softplus", [x], F32, F32, F32)
    assert format_value(got) == "add(max(x[], 0:f32), log1p(exp(neg(abs(x[])))))"
    silu = apply("silu", [x], F32, F32, F32)
    assert silu == Binary(
        F32, "mul", x, Unary(F32, "recip", Binary(F32, "add", Const(F32, 1), Unary(F32, "exp", Unary(F32, "neg", x))))
    )
    assert apply("gt", [x, Const(F32, 0)], F32, F32, F32).op == "lt"  # a > b is b < a


def test_reference_meanings_come_from_the_registry():
    x = np.array([-1.5, 0.0, 2.0])
    assert np.array_equal(reference.apply("relu", [x], F64, F64), [0.0, 0.0, 2.0])
    a, b = np.array([7, -7], dtype=np.int32), np.array([0, 2], dtype=np.int32)
    assert np.array_equal(reference.apply("floordiv", [a, b], I32, I32), [0, -4])  # by zero gives 0
