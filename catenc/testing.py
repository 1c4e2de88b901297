"""`--test`: run every compiled entry on random inputs and compare with the reference."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from catenc.compiler import EntryPlan, FilePlan
from catenc.diagnostics import CatencError
from catenc.dtypes import DType, from_storage, to_storage
from catenc.frontend.check import decide
from catenc.frontend.composites import Composite
from catenc.loader import STATUS_NAMES, CatencStatusError, Library
from catenc.reference import run_program
from catenc.symbolic import Facts, const, parse_expr

DEFAULT_TOLERANCE = {
    "f64": (1e-9, 1e-9),
    "f32": (2e-4, 2e-5),
    "f16": (2e-2, 2e-2),
    "bf16": (6e-2, 6e-2),
}


@dataclass
class OutputCheck:
    entry: str
    output: str
    max_abs: float
    max_rel: float
    ok: bool


def parse_sizes(text: str) -> dict[str, int]:
    """'M=100,N=64' -> {'M': 100, 'N': 64}."""
    sizes: dict[str, int] = {}
    for piece in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = piece.partition("=")
        if not sep or not name.strip().isidentifier():
            raise CatencError(f"--test: expected NAME=INT pairs separated by commas, got '{piece}'")
        try:
            number = int(value)
        except ValueError:
            raise CatencError(f"--test: size '{name.strip()}' must be an integer, got '{value}'") from None
        if number < 0:
            raise CatencError(f"--test: size '{name.strip()}' must not be negative")
        sizes[name.strip()] = number
    return sizes


def entry_sizes(entry: EntryPlan, given: dict[str, int]) -> dict[str, int]:
    """Values of the entry's free symbols: --test sizes first, then the composite's test.sizes."""
    defaults = entry.composite.test.get("sizes", {})
    values = {}
    for dim in entry.dims:
        if dim in given:
            values[dim] = given[dim]
        elif dim in defaults:
            values[dim] = int(defaults[dim])
        else:
            raise CatencError(
                f"--test: no size for symbol '{dim}' of '{entry.name}'; pass it (e.g. --test \"{dim}=8\") "
                "or set test.sizes in the composite",
                entry.composite.loc,
            )
    for check in entry.checks:
        facts = Facts()
        lhs = check.lhs.substitute({k: const(v) for k, v in values.items()})
        rhs = check.rhs.substitute({k: const(v) for k, v in values.items()})
        if decide(lhs, check.op, rhs, facts) is False:
            raise CatencError(
                f"--test sizes {values} violate the constraint '{check.text}' of '{entry.name}'",
                check.loc,
            )
    return values


def input_range(composite, name: str, env: dict[str, int]) -> tuple[float, float] | None:
    """The composite's test.ranges entry for an input, evaluated at these sizes."""
    bounds = composite.test.get("ranges", {}).get(name)
    if bounds is None:
        return None
    return tuple(parse_expr(b).evaluate(env) if isinstance(b, str) else b for b in bounds)


def random_input(
    rng: np.random.Generator, dtype: DType, shape: tuple[int, ...], bounds: tuple[float, float] | None = None
) -> np.ndarray:
    """Values (not storage bits) for an input of this dtype, within [low, high) when given."""
    if dtype.name == "bool":
        return rng.random(shape) < 0.5
    if bounds is not None:
        low, high = bounds
        if dtype.is_float:
            values = rng.uniform(low, high, shape)
            return values.astype(np.float16 if dtype.name == "f16" else np.float32 if dtype.bits <= 32 else np.float64)
        return rng.integers(int(low), max(int(high), int(low) + 1), shape).astype(dtype.numpy)
    if dtype.is_float:
        values = rng.standard_normal(shape).astype(np.float32 if dtype.bits <= 32 else np.float64)
        if dtype.name == "f16":
            values = values.astype(np.float16)
        return values
    if dtype.kind == "uint":
        return rng.integers(0, 10, shape).astype(dtype.numpy)
    return rng.integers(-8, 9, shape).astype(dtype.numpy)


def run_reference(
    entry: EntryPlan, composite: Composite, values: dict[str, np.ndarray], env: dict[str, int]
) -> list[np.ndarray]:
    """The composite's test.reference, called with inputs, symbols and params by name (symbols
    of the test harness's own batch dims left out), or catenc's interpreter of the body."""
    source = composite.test.get("reference")
    if source is None:
        outputs = run_program(entry.program, values, env)
        return [outputs[name] for name, _ in entry.program.outputs]
    symbols = {k: v for k, v in env.items() if not k.startswith("batch")}
    namespace: dict = {"np": np, "numpy": np}
    try:
        exec(compile(source, f"<test.reference of {composite.name}>", "exec"), namespace)
        result = namespace["reference"](**values, **symbols, **dict(entry.program.params))
    except Exception as err:  # the reference is the user's code
        raise CatencError(
            f"test.reference of '{composite.name}' failed: {type(err).__name__}: {err}", composite.loc
        ) from None
    return list(result) if isinstance(result, tuple) else [result]


def run_once(
    entry: EntryPlan, composite: Composite, function, sizes: dict[str, int], seed: int
) -> tuple[list[OutputCheck], list[np.ndarray]]:
    """Call an entry on random inputs (within the composite's test.ranges) at these sizes and
    compare every output with the reference; returns the checks and the inputs used."""
    rng = np.random.default_rng(seed)
    env = {**entry.specialized, **sizes}  # symbols fixed with -D are sizes too
    env.update({k: int(v.evaluate(env)) for k, v in entry.derived.items()})
    values, storage = {}, []
    for name, ttype in entry.program.inputs:
        shape = tuple(int(d.evaluate(env)) for d in ttype.shape)
        stored = to_storage(random_input(rng, ttype.dtype, shape, input_range(composite, name, env)), ttype.dtype)
        storage.append(stored)
        values[name] = stored_values(stored, ttype.dtype)
    try:
        result = function(*storage, **sizes)
    except CatencStatusError as err:
        hint = '; give its index inputs a test.ranges (e.g. ids = [0, "V"])' if err.status == 3 else ""
        raise CatencError(
            f"'{entry.name}' returned {STATUS_NAMES.get(err.status, err.status)} on random inputs at {sizes}{hint}",
            composite.loc,
        ) from None
    outputs = result if isinstance(result, tuple) else (result,)
    reference = run_reference(entry, composite, values, env)
    checks = []
    for (name, ttype), got, want in zip(entry.program.outputs, outputs, reference):
        rtol, atol = DEFAULT_TOLERANCE.get(ttype.dtype.name, (0.0, 0.0))
        rtol = float(composite.test.get("rtol", rtol))
        atol = float(composite.test.get("atol", atol))
        max_abs, max_rel, ok = compare(
            stored_values(np.asarray(got), ttype.dtype), np.asarray(want), ttype.dtype, rtol, atol
        )
        checks.append(OutputCheck(entry.name, name, max_abs, max_rel, ok))
    return checks, storage


def stored_values(stored: np.ndarray, dtype: DType) -> np.ndarray:
    """The values a buffer holds (f16/bf16 widened to f32), as references receive them."""
    values = from_storage(stored, dtype)
    return values.astype(np.float32) if dtype.is_half else values


def compare(got: np.ndarray, want: np.ndarray, dtype: DType, rtol: float, atol: float) -> tuple[float, float, bool]:
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return float("inf"), float("inf"), False
    if got.size == 0:
        return 0.0, 0.0, True
    with np.errstate(all="ignore"):
        return _compare(got, want, dtype, rtol, atol)


def _compare(got: np.ndarray, want: np.ndarray, dtype: DType, rtol: float, atol: float) -> tuple[float, float, bool]:
    same_nan = np.isnan(got) == np.isnan(want)
    both = ~np.isnan(got) & ~np.isnan(want)
    same_inf = np.where(np.isinf(want) & both, got == want, True)
    finite = both & np.isfinite(want) & np.isfinite(got)
    diff = np.where(finite, np.abs(got - want), 0.0)
    rel = np.where(finite, diff / np.maximum(np.abs(want), 1e-30), 0.0)
    within = np.where(finite, diff <= atol + rtol * np.abs(want), True)
    ok = bool(np.all(same_nan) and np.all(same_inf) and np.all(within))
    if not dtype.is_float:
        ok = ok and bool(np.array_equal(got, want, equal_nan=True))
    return float(diff.max()), float(rel.max()), ok


def check_entries(
    plan: FilePlan, library: Library, given: dict[str, int], seed: int = 0
) -> tuple[list[OutputCheck], list[str]]:
    """Run each entry once against the reference, then time it; returns checks and report lines."""
    checks: list[OutputCheck] = []
    lines: list[str] = []
    for entry in plan.entries:
        symbols = entry_sizes(entry, given)
        function = library[entry.name]
        results, storage = run_once(entry, entry.composite, function, symbols, seed)
        elapsed = _time(function, storage, symbols)
        shown = ", ".join(f"{k}={v}" for k, v in symbols.items())
        for check in results:
            verdict = "ok" if check.ok else "MISMATCH"
            lines.append(
                f"{entry.name}: {check.output}  max abs err {check.max_abs:.3g}  max rel err {check.max_rel:.3g}  "
                f"[{shown}]  {elapsed * 1e3:.3f} ms  {verdict}"
            )
        checks += results
    return checks, lines


def _time(function, args, kwargs, budget: float = 0.2, runs: int = 20) -> float:
    """Median seconds per call, over up to `runs` calls within about `budget` seconds."""
    times = []
    start = time.perf_counter()
    for _ in range(runs):
        t0 = time.perf_counter()
        function(*args, **kwargs)
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget:
            break
    return statistics.median(times)
