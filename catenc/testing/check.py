"""`--test`: run every compiled entry on random inputs and compare with the reference."""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from catenc.diagnostics import CatencError
from catenc.dtypes import DType, from_storage, to_storage
from catenc.frontend import typed as T
from catenc.frontend.check import decide
from catenc.frontend.composites import Composite
from catenc.loader import STATUS_NAMES, CatencStatusError, Library
from catenc.lower.loops import WinogradGemm, iter_stmts
from catenc.plan import EntryPlan, FilePlan
from catenc.schedule.winograd import ROUNDING
from catenc.symbolic import Facts, const, parse_expr
from catenc.testing.reference import compute_dtype, run_program

# (rtol, atol) of an output computed without a long reduction: a few elementwise roundings
# (and the library math functions' error) in the output's precision.
DEFAULT_TOLERANCE = {
    "f64": (1e-9, 1e-9),
    "f32": (2e-4, 2e-5),
    "f16": (2e-2, 2e-2),
    "bf16": (6e-2, 6e-2),
}
# The multiple of ε·√K·max|want| (see `reduction_rounding`) the default atol allows. Measured: a
# single-accumulator f32 gemm (clang -O0, OpenCL on PoCL) of random normal inputs, K = 1e5, is off
# by up to 0.3·ε·√K·max|want| over 6400 outputs (with a relu after it too); vectorised and
# blocked sums by far less.
ROUNDING_MARGIN = 2.0
# A --test run holds each tensor about this many times: its storage, its values widened for
# the reference, the reference's result and the float64 copies the comparison makes.
COPIES_PER_TENSOR = 4


@dataclass(frozen=True)
class OutputCheck:
    entry: str
    output: str
    max_abs: float
    max_rel: float
    ok: bool
    rtol: float = 0.0  # the tolerance it was checked against: |got - want| <= atol + rtol·|want|
    atol: float = 0.0
    exact: bool = False  # integers and booleans are compared for equality
    worst: float = 0.0  # the largest |got - want| / (atol + rtol·|want|): above 1 fails


def parse_sizes(text: str, option: str = "--test") -> dict[str, int]:
    """'M=100,N=64' -> {'M': 100, 'N': 64} (errors name `option`)."""
    sizes: dict[str, int] = {}
    for piece in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = piece.partition("=")
        if not sep or not name.strip().isidentifier():
            raise CatencError(f"{option}: expected NAME=INT pairs separated by commas, got '{piece}'")
        try:
            number = int(value)
        except ValueError:
            raise CatencError(f"{option}: size '{name.strip()}' must be an integer, got '{value}'") from None
        if number < 0:
            raise CatencError(f"{option}: size '{name.strip()}' must not be negative")
        sizes[name.strip()] = number
    return sizes


def entry_sizes(entry: EntryPlan, given: dict[str, int], option: str = "--test") -> dict[str, int]:
    """Values of the entry's free symbols: the sizes given (with `option`) first, then the
    composite's test.sizes; checked against the entry's constraints."""
    defaults = entry.composite.test.get("sizes", {})
    values = {}
    for dim in entry.dims:
        if dim in given:
            values[dim] = given[dim]
        elif dim in defaults:
            values[dim] = int(defaults[dim])
        else:
            raise CatencError(
                f"{option}: no size for symbol '{dim}' of '{entry.name}'; pass it (e.g. {option} \"{dim}=8\") "
                "or set test.sizes in the composite",
                entry.composite.loc,
            )
    for check in entry.checks:
        facts = Facts()
        lhs = check.lhs.substitute({k: const(v) for k, v in values.items()})
        rhs = check.rhs.substitute({k: const(v) for k, v in values.items()})
        if decide(lhs, check.op, rhs, facts) is False:
            raise CatencError(
                f"{option} sizes {values} violate the constraint '{check.text}' of '{entry.name}'",
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
    where = composite.source.loc(composite.keypath + ("test", "reference"))
    try:
        exec(compile(source, f"<test.reference of {composite.name}>", "exec"), namespace)
        function = namespace.get("reference")
        if not callable(function):
            raise CatencError(f"test.reference of '{composite.name}' defines no function 'reference'", where)
        result = function(**values, **symbols, **dict(entry.program.params))
    except (CatencError, KeyboardInterrupt, MemoryError):
        raise
    except BaseException as err:  # the reference is the user's code: even SystemExit is its failure
        raise CatencError(f"test.reference of '{composite.name}' failed: {type(err).__name__}: {err}", where) from None
    return reference_arrays(entry, composite, result, env, where)


def reference_arrays(entry: EntryPlan, composite: Composite, result, env: dict[str, int], where) -> list[np.ndarray]:
    """A reference's result as one array of numbers per output, each of the output's shape."""
    outputs = entry.program.outputs
    many = isinstance(result, tuple) or (isinstance(result, list) and len(outputs) > 1)
    items = list(result) if many else [result]
    names = ", ".join(name for name, _ in outputs)
    if len(items) != len(outputs):
        raise CatencError(
            f"test.reference of '{composite.name}' returned {len(items)} value(s); expected {len(outputs)}, "
            f"one per output ({names})",
            where,
        )
    arrays = []
    for (name, ttype), item in zip(outputs, items):
        shape = tuple(int(d.evaluate(env)) for d in ttype.shape)
        expected = f"{ttype.dtype.name} values of shape {shape}"
        try:
            array = np.asarray(item)
        except ValueError:  # ragged nested lists
            array = np.asarray(None)
        if array.dtype.kind not in "biuf":
            what = f"a {type(item).__name__}" if array.ndim == 0 or array.dtype.kind == "O" else f"{array.dtype} values"
            raise CatencError(
                f"test.reference of '{composite.name}' returned {what} for output '{name}'; expected {expected}",
                where,
            )
        if array.shape != shape:
            raise CatencError(
                f"test.reference of '{composite.name}' returned shape {array.shape} for output '{name}'; "
                f"expected {expected}",
                where,
            )
        arrays.append(array)
    return arrays


def reduction_rounding(program: T.Program, env: dict[str, int]) -> float:
    """ε·√K of the program's worst floating-point reduction of K terms (sum, mean, prod, matmul
    and index-form sums, callees included), ε of the precision it accumulates in; 0 if none.

    The compiled code and the reference accumulate in the same precision (f32 for f32, f16 and
    bf16; f64 for f64) in different orders (vector lanes, blocks, work-group trees against
    numpy's pairwise sums and BLAS). Each rounding error is at most ε/2 of a partial sum, and on
    random inputs the K of them add like a random walk: a fraction of ε·√K relative to the
    largest output (K·ε is the worst case, reached only by adversarial data). The largest output
    stands for the partial sums' size, since a relu or a mean after the sum shrinks the rest."""
    worst = 0.0
    for node in _typed_items(program.statements):
        terms = _reduced_terms(node, env)
        if terms > 1 and node.type.dtype.is_float:
            worst = max(worst, float(np.finfo(compute_dtype(node.type.dtype)).eps) * math.sqrt(terms))
    return worst


def winograd_rounding(entry: EntryPlan) -> float:
    """The multiple of the direct sums' rounding the entry's Winograd convolutions may show (1: none)."""
    stmts = (stmt for kernel in entry.kernels for stmt in iter_stmts(kernel.body))
    return max((ROUNDING[stmt.plan.transform.m] for stmt in stmts if isinstance(stmt, WinogradGemm)), default=1.0)


def _typed_items(roots) -> Iterator[object]:
    """Every statement, node and callee program reachable from these, each once."""
    seen: set[int] = set()
    stack: list[object] = list(roots)
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        if isinstance(item, T.Program):
            stack += item.statements
            continue
        for part in dataclasses.fields(item):
            value = getattr(item, part.name)
            stack += [v for v in (value if isinstance(value, tuple) else (value,)) if _walkable(v)]


def _walkable(value: object) -> bool:
    return isinstance(value, (T.Node, T.Program, T.Assign, T.IndexAssign))


def _reduced_terms(node: object, env: dict[str, int]) -> int:
    """How many terms one result of this node accumulates (0 for a node that is no reduction)."""
    if isinstance(node, T.Reduce) and node.op in ("sum", "mean", "prod"):
        return math.prod(int(node.arg.type.shape[a].evaluate(env)) for a in node.axes)
    if isinstance(node, T.IndexReduce) and node.op in ("sum", "mean", "prod"):
        return math.prod(int(extent.evaluate(env)) for _, extent in node.indices)
    if isinstance(node, T.MatMul) and node.a.type.shape:
        return int(node.a.type.shape[-1].evaluate(env))
    return 0


def tolerance(composite: Composite, dtype: DType, rounding: float, want: np.ndarray) -> tuple[float, float]:
    """(rtol, atol) of one output: test.rtol and test.atol when given, else the dtype's default
    widened by the reductions' rounding, atol in proportion to the reference's largest value."""
    base_rtol, base_atol = DEFAULT_TOLERANCE.get(dtype.name, (0.0, 0.0))
    largest = 0.0
    if rounding:
        with np.errstate(all="ignore"):
            magnitude = np.abs(np.asarray(want, dtype=np.float64))
            largest = float(magnitude[np.isfinite(magnitude)].max(initial=0.0))
    rtol = float(composite.test.get("rtol", base_rtol + ROUNDING_MARGIN * rounding))
    atol = float(composite.test.get("atol", base_atol + ROUNDING_MARGIN * rounding * largest))
    return rtol, atol


def check_memory(entry: EntryPlan, sizes: dict[str, int], env: dict[str, int]) -> None:
    """A user error, before anything is allocated, when the sizes need more than this machine's
    memory: the inputs and outputs, plus the largest value the reference interpreter computes."""
    memory = _physical_memory()
    tensors = [(f"input '{name}'", ttype) for name, ttype in entry.program.inputs]
    tensors += [(f"output '{name}'", ttype) for name, ttype in entry.program.outputs]
    need = [(_nbytes(ttype.dtype, ttype.shape, env, storage=True), what, ttype, None) for what, ttype in tensors]
    total = COPIES_PER_TENSOR * sum(n for n, *_ in need)
    if entry.composite.test.get("reference") is None:
        largest = max(_reference_values(entry.program, env), key=_size_then_first, default=None)
        if largest is not None:
            need.append(largest)
            total += largest[0]
    if memory is None or total <= memory:
        return
    nbytes, what, ttype, loc = max(need, key=lambda item: item[0])
    dims = ", ".join(str(int(d.evaluate(env))) for d in ttype.shape)
    shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
    raise CatencError(
        f"--test at {shown}: {what} of '{entry.name}' ({ttype.dtype.name}[{dims}]) takes {_bytes(nbytes)}; the "
        f"test needs about {_bytes(total)}, more than this machine's {_bytes(memory)} of memory; give smaller sizes",
        loc,
    )


def _reference_values(program: T.Program, env: dict[str, int]) -> Iterator[tuple[int, str, T.TType, object]]:
    """(bytes, what, type, loc) of each value the reference interpreter materialises: every node's
    value, and for an index-form statement its grid over all its indices, reductions' included."""
    for item in _typed_items(program.statements):
        if isinstance(item, T.IndexAssign):
            extents = [e for _, e in item.indices]
            extents += [
                e for node in _typed_items([item.body]) if isinstance(node, T.IndexReduce) for _, e in node.indices
            ]
            grid = T.TType(item.type.dtype, tuple(extents))
            yield _nbytes(grid.dtype, grid.shape, env), f"the reference's grid for '{item.target}'", grid, item.loc
        elif isinstance(item, T.Node) and not isinstance(item, _VIEWS) and item.type.shape:
            yield _nbytes(item.type.dtype, item.type.shape, env), "a value the reference computes", item.type, item.loc


_VIEWS = (T.Ref, T.Expand, T.Reshape, T.Permute)  # the interpreter allocates nothing for these


def _size_then_first(item: tuple) -> tuple:
    """Order by size, then the earliest in the source first (where a large value is made)."""
    loc = item[3]
    return (item[0], -loc.line, -loc.col) if loc is not None else (item[0], 0, 0)


def _nbytes(dtype: DType, shape, env: dict[str, int], storage: bool = False) -> int:
    """Bytes of a tensor as stored (storage) or as the reference holds it."""
    itemsize = max(dtype.bits // 8, 1) if storage else compute_dtype(dtype).itemsize
    return math.prod(int(d.evaluate(env)) for d in shape) * itemsize


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows)
        return None


def _bytes(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def run_once(
    entry: EntryPlan, composite: Composite, function, sizes: dict[str, int], seed: int
) -> tuple[list[OutputCheck], list[np.ndarray]]:
    """Call an entry on random inputs (within the composite's test.ranges) at these sizes and
    compare every output with the reference; returns the checks and the inputs used."""
    env = entry_env(entry, sizes)
    check_memory(entry, sizes, env)
    try:
        return _run_once(entry, composite, function, sizes, env, seed)
    except MemoryError as err:  # an intermediate of the reference or the workspace
        shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
        raise CatencError(
            f"--test ran out of memory running '{entry.name}' at {shown} ({err}); give smaller sizes", composite.loc
        ) from None


def entry_env(entry: EntryPlan, sizes: dict[str, int]) -> dict[str, int]:
    """Every symbol's value: the free sizes, those fixed with -D and those `where` derives."""
    env = {**entry.specialized, **sizes}
    env.update({k: int(v.evaluate(env)) for k, v in entry.derived.items()})
    return env


def random_inputs(entry: EntryPlan, composite: Composite, env: dict[str, int], seed: int) -> list[np.ndarray]:
    """The entry's declared inputs at these symbol values, in storage form: random (within the
    composite's test.ranges) and seeded (its constants are baked or read from its weights file)."""
    rng = np.random.default_rng(seed)
    storage = []
    for name, ttype in entry.arguments:
        shape = tuple(int(d.evaluate(env)) for d in ttype.shape)
        storage.append(
            to_storage(random_input(rng, ttype.dtype, shape, input_range(composite, name, env)), ttype.dtype)
        )
    return storage


def program_inputs(entry: EntryPlan, arguments: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The values (not bits) of every input of the entry's program, given its declared inputs:
    its constants added."""
    storage = arguments + list(entry.constants)
    return {name: stored_values(s, ttype.dtype) for (name, ttype), s in zip(entry.program.inputs, storage, strict=True)}


def _run_once(
    entry: EntryPlan, composite: Composite, function, sizes: dict[str, int], env: dict[str, int], seed: int
) -> tuple[list[OutputCheck], list[np.ndarray]]:
    storage = random_inputs(entry, composite, env, seed)
    values = program_inputs(entry, storage)
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
    rounding = reduction_rounding(entry.program, env) * winograd_rounding(entry)
    checks = []
    for (name, ttype), got, want in zip(entry.program.outputs, outputs, reference):
        exact = not ttype.dtype.is_float
        rtol, atol = (0.0, 0.0) if exact else tolerance(composite, ttype.dtype, rounding, want)
        max_abs, max_rel, worst, ok = compare(
            stored_values(np.asarray(got), ttype.dtype), np.asarray(want), ttype.dtype, rtol, atol
        )
        checks.append(OutputCheck(entry.name, name, max_abs, max_rel, ok, rtol, atol, exact, worst))
    return checks, storage


def stored_values(stored: np.ndarray, dtype: DType) -> np.ndarray:
    """The values a buffer holds (f16/bf16 widened to f32), as references receive them."""
    values = from_storage(stored, dtype)
    return values.astype(np.float32) if dtype.is_half else values


def compare(
    got: np.ndarray, want: np.ndarray, dtype: DType, rtol: float, atol: float
) -> tuple[float, float, float, bool]:
    """(max abs error, max rel error, the worst error as a fraction of its tolerance, all within)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return float("inf"), float("inf"), float("inf"), False
    if got.size == 0:
        return 0.0, 0.0, 0.0, True
    with np.errstate(all="ignore"):
        return _compare(got, want, dtype, rtol, atol)


def _compare(
    got: np.ndarray, want: np.ndarray, dtype: DType, rtol: float, atol: float
) -> tuple[float, float, float, bool]:
    same_nan = np.isnan(got) == np.isnan(want)
    both = ~np.isnan(got) & ~np.isnan(want)
    same_inf = np.where(np.isinf(want) & both, got == want, True)
    finite = both & np.isfinite(want) & np.isfinite(got)
    diff = np.where(finite, np.abs(got - want), 0.0)
    rel = np.where(finite, diff / np.maximum(np.abs(want), 1e-30), 0.0)
    allowed = atol + rtol * np.abs(want)
    within = np.where(finite, diff <= allowed, True)
    share = np.where(diff > 0, diff / np.where(allowed > 0, allowed, 1.0), 0.0)
    share = np.where((diff > 0) & (allowed == 0), np.inf, share)
    ok = bool(np.all(same_nan) and np.all(same_inf) and np.all(within))
    if not dtype.is_float:
        ok = ok and bool(np.array_equal(got, want, equal_nan=True))
    return float(diff.max()), float(rel.max()), float(share.max()), ok


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
                f"{entry.name}: {check.output}  {_errors_text(check)}  [{shown}]  {elapsed * 1e3:.3f} ms  {verdict}"
            )
        checks += results
    return checks, lines


def _errors_text(check: OutputCheck) -> str:
    """The errors measured beside the tolerance they were held to."""
    if check.exact:
        return f"max abs err {check.max_abs:.3g} (exact)"
    measured = f"max abs err {check.max_abs:.2e} (atol {check.atol:.2e})"
    measured += f"  max rel err {check.max_rel:.2e} (rtol {check.rtol:.2e})"
    return f"{measured}  worst {check.worst:.0%} of atol+rtol*|want|"


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
