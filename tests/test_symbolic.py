"""Symbolic integers: canonical forms agree with evaluation, and proofs are sound."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from catenc.symbolic import (
    Facts,
    const,
    floordiv,
    maximum,
    minimum,
    mod,
    parse_expr,
    prove_less,
    prove_nonneg,
    row_major,
    simplify,
    sym,
    total,
)

NAMES = ("M", "N", "i", "j")


@st.composite
def exprs(draw, depth=3):
    if depth == 0 or draw(st.booleans()):
        if draw(st.booleans()):
            return const(draw(st.integers(-5, 5)))
        return sym(draw(st.sampled_from(NAMES)))
    a, b = draw(exprs(depth=depth - 1)), draw(exprs(depth=depth - 1))
    op = draw(st.sampled_from(["+", "-", "*", "//", "%", "max", "min"]))
    if op in ("//", "%"):
        b = const(draw(st.integers(1, 6)))
        return floordiv(a, b) if op == "//" else mod(a, b)
    return {"+": a + b, "-": a - b, "*": a * b, "max": maximum(a, b), "min": minimum(a, b)}[op]


def _python_value(text: str, env: dict[str, int]) -> int:
    return eval(text, {"max": max, "min": min}, dict(env))  # test oracle over our own rendering


@settings(max_examples=300, deadline=None)
@given(exprs(), st.fixed_dictionaries({n: st.integers(0, 9) for n in NAMES}))
def test_rendering_and_evaluation_agree(e, env):
    assert _python_value(str(e), env) == e.evaluate(env)
    assert parse_expr(str(e)).evaluate(env) == e.evaluate(env)


def test_canonical_forms_compare_equal():
    M, N = sym("M"), sym("N")
    assert parse_expr("2*N + M - N") == M + N
    assert parse_expr("(M*N)//N") == M
    assert parse_expr("(4*M + 3) % 4") == const(3)
    assert str(parse_expr("N*(M + 1) - 3*N")) == "M*N - 2*N"


@settings(max_examples=300, deadline=None)
@given(exprs(depth=2))
def test_prove_nonneg_is_sound(e):
    """Whatever the prover accepts holds at every point of the index box it was given."""
    facts = Facts().with_range("i", sym("M")).with_range("j", sym("N"))
    if not prove_nonneg(e, facts):
        return
    for M, N in itertools.product(range(1, 6), repeat=2):
        for i, j in itertools.product(range(M), range(N)):
            assert e.evaluate({"M": M, "N": N, "i": i, "j": j}) >= 0, (e, M, N, i, j)


def test_bounds_proofs_with_guards():
    i, j, H = sym("i"), sym("j"), sym("H")
    box = Facts().with_range("i", H).with_range("j", const(3))
    shifted = i + j - 1
    assert not prove_nonneg(shifted, box)
    guarded = box.with_nonneg(shifted, H - 1 - shifted)
    assert prove_nonneg(shifted, guarded) and prove_less(shifted, H, guarded)
    assert prove_less(i, H, box) and not prove_less(i + 1, H, box)


def test_simplify_folds_divisions_inside_the_range():
    i, j, N, M = sym("i"), sym("j"), sym("N"), sym("M")
    box = Facts().with_range("i", M).with_range("j", N)
    assert simplify(((i * N + j) // N) % M, box) == i
    assert simplify((i * N + j) % N, box) == j
    assert simplify((j + 1) // N, box) != const(0)  # j + 1 may reach N


def test_divisions_and_remainders_in_bounds_proofs():
    i, N = sym("i"), sym("N")
    box = Facts().with_range("i", N)
    assert prove_less(floordiv(i, 2), 2 * N, box)  # x[b, i // 2] with x: [B, 2*N]
    assert prove_less(mod(i, 2), 2, box)
    assert prove_less(2 * i + 1, 2 * N, box)
    assert not prove_less(floordiv(i, 2) + N, N, box)


def test_case_splits_decide_max_min_and_small_values():
    N = sym("N")
    rolled = maximum(N - 1, 0) + minimum(N, 1)  # len(x[1:]) + len(x[:1])
    assert prove_nonneg(rolled - N) and prove_nonneg(N - rolled)
    assert prove_nonneg(N - floordiv(N + 1, 2))  # (N + 1) // 2 <= N, tight at N = 0 and 1
    assert not prove_nonneg(N - floordiv(N + 3, 2))  # fails at N = 0
    assert prove_nonneg(-maximum(minimum(N, 3) - 3, 0)) and prove_nonneg(maximum(minimum(N, 3) - 3, 0))


def test_evaluate_broadcasts_numpy_index_arrays():
    import numpy as np

    o, k, S = sym("o"), sym("k"), sym("S")
    grid = {"o": np.arange(7).reshape(7, 1), "k": np.arange(3).reshape(1, 3), "S": 2}
    np.testing.assert_array_equal((o * S + k).evaluate(grid), np.arange(7)[:, None] * 2 + np.arange(3)[None, :])


def test_facts_about_divisions():
    k, K, C, c, N, i, H = (sym(n) for n in ("k", "K", "C", "c", "N", "i", "H"))
    box = Facts().with_range("k", K).with_range("c", C)
    assert prove_less(floordiv(k, K) * C + c, C, box)  # k // K is 0 for k < K, K a symbol
    even = Facts().with_nonneg(-mod(C, 2))  # the constraint C % 2 == 0
    assert prove_nonneg(2 * N * floordiv(C, 2) - N * C, even) and prove_nonneg(N * C - 2 * N * floordiv(C, 2), even)
    assert not prove_nonneg(2 * N * floordiv(C, 2) - N * C, Facts())  # C odd breaks it
    guarded = Facts().with_range("i", 2 * H + 1).with_nonneg(i - 1, H - 1 - floordiv(i - 1, 2))
    assert prove_nonneg(floordiv(i - 1, 2), guarded) and prove_less(floordiv(i - 1, 2), H, guarded)


@given(st.lists(st.integers(1, 5), min_size=1, max_size=5), st.data())
@settings(max_examples=60, deadline=None)
def test_row_major_is_numpys_ravel(dims, data):
    index = [data.draw(st.integers(0, d - 1)) for d in dims]
    names = [f"i{k}" for k in range(len(dims))]
    shape = [sym(f"D{k}") for k in range(len(dims))]
    position = row_major([sym(n) for n in names], shape)
    env = {**dict(zip(names, index)), **{f"D{k}": d for k, d in enumerate(dims)}}
    assert position.evaluate(env) == np.ravel_multi_index(index, dims)
    assert total([sym("i0"), 3, sym("i0"), -3]) == sym("i0") * 2


def test_row_major_work_is_linear_in_the_rank(monkeypatch):
    """A rank-R position costs O(R) monomial products (Horner's form costs O(R^2): a rank-1000
    tensor took 15 s to compile)."""
    import catenc.symbolic as symbolic

    calls = []
    original = symbolic._mul_monomials
    monkeypatch.setattr(symbolic, "_mul_monomials", lambda a, b: calls.append(1) or original(a, b))
    for rank in (100, 400):
        calls.clear()
        position = row_major([sym(f"i{k}") for k in range(rank)], [sym("N")] * rank)
        assert len(position.terms) == rank
        assert len(calls) <= 2 * rank, (rank, len(calls))


def test_an_exact_division_multiplied_back_cancels():
    """Where the facts say C % 8 == 0 (a `where` line), k*(C // 8) is (k / 8)*C for k a multiple
    of 8 (also of a divisor: C // 4 under C % 8 == 0); other multiples keep the division."""
    C, i = sym("C"), sym("i")
    facts = Facts().with_nonneg(-mod(C, 8))
    assert simplify(8 * floordiv(C, 8) * i + 3, facts) == C * i + 3
    assert simplify(16 * floordiv(C, 4), facts) == 4 * C
    assert simplify(4 * floordiv(C, 8), facts) == 4 * floordiv(C, 8)
    assert simplify(8 * floordiv(C, 8), Facts()) == 8 * floordiv(C, 8)  # no fact: C = 9 gives 8
    huge = Facts().with_nonneg(-mod(C, 2**62))  # no divisor is enumerated: this answers at once
    assert simplify(8 * floordiv(C, 8) + 3 * floordiv(C, 3), huge) == C + 3 * floordiv(C, 3)
