"""Composite definitions: the checked contents of a composite file, and the search for them.

`load_composites` reads a file and its includes into `Composite` records (declarations parsed,
keys validated, every piece carrying its place in the file). `Library` finds a composite by
name in the search order of docs/language.md §10: the file and its includes, each `-I` directory, `ops/`.
"""

from __future__ import annotations

import itertools
import keyword
import os
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from catenc.diagnostics import CatencError, Loc, closest, remember_source
from catenc.dtypes import DTYPES
from catenc.frontend.source import KeyPath, SourceFile, load_source, source_from_text
from catenc.symbolic import Expr, SymbolicSyntaxError, parse_expr
from catenc.weights import Tensor, WeightsError, read_weights

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
COMPOSITE_KEYS = ("doc", "inputs", "outputs", "types", "where", "params", "weights", "constants", "body", "test")
TOP_KEYS = ("composite", "include")
TEST_KEYS = ("sizes", "rtol", "atol", "reference", "ranges")
C_RESERVED = frozenset(
    """auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union
    unsigned void volatile while _Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic
    _Noreturn _Static_assert _Thread_local bool true false NULL main
    abort abs acos asin atan atan2 atof atoi atol calloc ceil cos cosh div exit exp fabs floor fmod
    free frexp getenv labs ldexp log log10 malloc memchr memcmp memcpy memmove memset modf pow printf
    qsort rand realloc sin sinh sqrt srand strcat strchr strcmp strcpy strlen strncmp strncpy strstr
    tan tanh time exp2 log2 log1p expm1 erf erfc round trunc rint fmax fmin fma cbrt hypot lround
    nearbyint tgamma lgamma isnan isinf isfinite signbit copysign puts putchar fprintf sprintf
    snprintf scanf fopen fclose fread fwrite assert offsetof""".split()
)
MAX_CONSTANT = 1 << 62  # constants in shapes must stay far inside int64_t
CONSTRAINT_OPS = ("==", "!=", "<=", ">=", "<", ">")


@dataclass(frozen=True)
class TensorDecl:
    """`name: dtype[dims]`; `batch` is True when the first dim is `...`."""

    name: str
    dtype: str
    dims: tuple[Expr, ...]
    batch: bool
    loc: Loc
    symbol_order: tuple[str, ...] = ()  # symbols as first written in the dims, left to right

    def __str__(self) -> str:
        dims = (["..."] if self.batch else []) + [str(d) for d in self.dims]
        return f"{self.name}: {self.dtype}[{', '.join(dims)}]"


@dataclass(frozen=True)
class Constraint:
    lhs: Expr
    op: str
    rhs: Expr
    text: str
    loc: Loc


@dataclass
class Composite:
    name: str
    source: SourceFile
    keypath: KeyPath
    doc: str
    inputs: list[TensorDecl]
    outputs: list[TensorDecl]
    types: dict[str, list[str]]
    derived: dict[str, Expr]
    constraints: list[Constraint]
    params: dict[str, bool | int | float]
    body: str
    test: dict = field(default_factory=dict)
    derived_locs: dict[str, Loc] = field(default_factory=dict)  # where each derivation is written
    constants: list[TensorDecl] = field(default_factory=list)  # tensors with values, read after the inputs
    constant_values: dict[str, np.ndarray] = field(default_factory=dict, compare=False)  # by name, storage form
    weights_file: tuple[str, str] | None = None  # (display path, path on disk) of its `weights`

    @property
    def loc(self) -> Loc:
        return self.source.key_loc(self.keypath)

    @property
    def arguments(self) -> list[TensorDecl]:
        """The tensors a body starts from: the inputs, then the constants."""
        return self.inputs + self.constants

    @property
    def is_batched(self) -> bool:
        return any(d.batch for d in self.inputs + self.outputs)

    def body_loc(self, offset: int) -> Loc:
        return self.source.string_loc(self.keypath + ("body",), offset)

    def symbols(self) -> list[str]:
        """Symbols in order of first appearance in the input then output declarations."""
        seen: list[str] = []
        for decl in self.inputs + self.outputs:
            for name in decl.symbol_order:
                if name not in seen and name not in self.params:
                    seen.append(name)
        for expr in self.derived.values():
            for name in _ordered_symbols(expr):
                if name not in seen and name not in self.params:
                    seen.append(name)
        return seen


def _ordered_symbols(expr: Expr) -> list[str]:
    """Symbols of expr in the order they are written (str form order is canonical, so sort
    by first textual position in the rendered expression)."""
    text = str(expr)
    names = expr.free_symbols()
    return sorted(names, key=lambda n: re.search(rf"\b{re.escape(n)}\b", text).start())


C_TYPES_AND_MACROS = frozenset(
    """int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t ptrdiff_t intptr_t uintptr_t
    NAN INFINITY HUGE_VAL HUGE_VALF EOF FILE errno stdin stdout stderr va_list""".split()
)
_MATH_FUNCS = """acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 expm1 log log10 log1p
log2 logb ilogb frexp ldexp modf scalbn scalbln cbrt fabs hypot pow sqrt erf erfc lgamma tgamma ceil floor
nearbyint rint lrint llrint round lround llround trunc fmod remainder remquo copysign nan nextafter nexttoward
fdim fmax fmin fma""".split()
C_LIBRARY_VARIANTS = frozenset(f + suffix for f in _MATH_FUNCS for suffix in ("", "f", "l"))


HIDING = ("tensor", "param", "symbol")  # kinds of names that may hide a built-in or a C name


def check_name(name: str, what: str, loc: Loc) -> None:
    """A name of kind `what` (docs/language.md, sections 1 and 2). A tensor, param or symbol may
    take a C keyword's or a C library function's name (hiding a built-in function of that name in
    its composite; generated code renames it); a composite, whose name is a C symbol, or a type
    variable may not."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise CatencError(f"invalid {what} name {name!r}: expected [A-Za-z_][A-Za-z0-9_]*", loc)
    reserved_for_c = name.startswith("__") or (name.startswith("_") and name[1:2].isupper())
    if name.lower().startswith("catenc_") or name in ("workspace", "workspace_bytes") or reserved_for_c:
        raise CatencError(f"{what} name '{name}' is reserved for the emitted C code", loc)
    if keyword.iskeyword(name):
        raise CatencError(f"{what} name '{name}' is reserved (a Python keyword, which a body cannot use)", loc)
    if what not in HIDING and (name in C_RESERVED or name in C_TYPES_AND_MACROS or name in C_LIBRARY_VARIANTS):
        raise CatencError(f"{what} name '{name}' is reserved (a C keyword or C library name)", loc)


# ---- parsing one composite ---------------------------------------------------------------------


class _Reader:
    """Reads typed values out of a SourceFile at a key path, with located errors."""

    def __init__(self, source: SourceFile, base: KeyPath):
        self.source = source
        self.base = base

    def loc(self, *path: str | int) -> Loc:
        return self.source.loc(self.base + path)

    def get(self, table: dict, key: str, kind: type | tuple[type, ...], what: str, default=None):
        if key not in table:
            return default
        value = table[key]
        # bool is an int in Python; it only passes where bool is asked for.
        wrong_bool = isinstance(value, bool) and bool not in _as_tuple(kind)
        if not isinstance(value, kind) or wrong_bool:
            raise CatencError(f"'{key}' must be {what}, not {_describe(value)}", self.loc(key))
        return value

    def decl(self, text: object, path: tuple) -> TensorDecl:
        loc = self.source.loc(self.base + path)
        if not isinstance(text, str):
            raise CatencError(
                f'a tensor declaration must be a string like "A: f32[M, K]", not {_describe(text)}',
                loc,
            )
        return parse_decl(text, lambda offset: self.source.string_loc(self.base + path, offset))


def _as_tuple(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


def _describe(value: object) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }
    return names.get(type(value), type(value).__name__)


_DECL_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[(.*)\])?\s*\Z", re.S)


def parse_decl(text: str, loc_at) -> TensorDecl:
    """Parse `name: dtype[dim, ...]`; loc_at(offset) locates a character of text."""
    match = _DECL_RE.match(text)
    if not match:
        raise CatencError(f"invalid tensor declaration '{text}': expected 'NAME: DTYPE[DIM, ...]'", loc_at(0))
    name, dtype, dims_text = match.group(1), match.group(2), match.group(3)
    check_name(name, "tensor", loc_at(match.start(1)))
    dims: list[Expr] = []
    order: list[str] = []
    batch = False
    if dims_text is not None and dims_text.strip():
        start = match.start(3)
        for index, (piece, offset) in enumerate(_split_commas(dims_text)):
            pos = start + offset + (len(piece) - len(piece.lstrip()))
            if piece.strip() == "...":
                if index != 0:
                    raise CatencError("'...' may appear only as the first dim", loc_at(pos))
                batch = True
                continue
            if not piece.strip():
                raise CatencError("empty dim in declaration", loc_at(pos))
            try:
                dim = parse_expr(piece)
            except SymbolicSyntaxError as err:
                raise CatencError(
                    f"invalid dim '{piece.strip()}': expected an integer, a symbol or an affine expression of them",
                    loc_at(pos + err.col),
                ) from None
            for sym_name in dim.free_symbols():
                check_name(sym_name, "symbol", loc_at(pos))
            if dim.is_const and dim.value < 0:
                raise CatencError(f"dim {dim} is negative", loc_at(pos))
            if any(abs(c) > MAX_CONSTANT for _, c in dim.terms):
                raise CatencError(f"dim {piece.strip()} has a constant beyond 2^62", loc_at(pos))
            dims.append(dim)
            for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", piece):
                if word in dim.free_symbols() and word not in order:
                    order.append(word)
    return TensorDecl(name, dtype, tuple(dims), batch, loc_at(0), tuple(order))


def _split_commas(text: str) -> Iterator[tuple[str, int]]:
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i], start
            start = i + 1
    yield text[start:], start


def _split_constraint(text: str) -> tuple[str, str, str, int] | None:
    for op in ("==", "!=", "<=", ">=", "<", ">"):
        depth = 0
        for i in range(len(text) - len(op) + 1):
            ch = text[i]
            depth += ch in "(["
            depth -= ch in ")]"
            if depth == 0 and text.startswith(op, i):
                if op in ("<", ">") and text[i + 1 : i + 2] == "=":
                    continue
                if op in ("<", ">") and i > 0 and text[i - 1] in "<>=!":
                    continue
                return text[:i], op, text[i + len(op) :], i
    return None


@dataclass(frozen=True)
class Origin:
    """Where a file's `weights` paths lead: its directory on disk and as displayed, and the
    constants' values given in memory (`composite_file_from_text`), else None."""

    directory: str
    display: str
    memory: Mapping[str, np.ndarray] | None = None


def parse_composite(source: SourceFile, name: str, definition: object, origin: Origin | None = None) -> Composite:
    base: KeyPath = ("composite", name)
    reader = _Reader(source, base)
    check_name(name, "composite", source.key_loc(base))
    if not isinstance(definition, dict):
        raise CatencError(f"composite '{name}' must be a table, not {_describe(definition)}", source.loc(base))
    for key in definition:
        if key not in COMPOSITE_KEYS:
            raise CatencError(
                f"unknown key '{key}' in composite '{name}'{closest(key, COMPOSITE_KEYS)}; "
                f"valid keys are {', '.join(COMPOSITE_KEYS)}",
                source.key_loc(base + (key,)),
            )
    for required in ("inputs", "outputs", "body"):
        if required not in definition:
            raise CatencError(f"composite '{name}' has no '{required}'", source.key_loc(base))
    doc = reader.get(definition, "doc", str, "a string", "")
    inputs_raw = reader.get(definition, "inputs", list, "a list of tensor declarations")
    outputs_raw = reader.get(definition, "outputs", list, "a list of tensor declarations")
    inputs = [reader.decl(t, ("inputs", i)) for i, t in enumerate(inputs_raw)]
    outputs = [reader.decl(t, ("outputs", i)) for i, t in enumerate(outputs_raw)]
    if not outputs:
        raise CatencError(f"composite '{name}' must declare at least one output", reader.loc("outputs"))
    seen: dict[str, TensorDecl] = {}
    for decl in inputs + outputs:
        if decl.name in seen:
            raise CatencError(
                f"'{decl.name}' is declared twice",
                decl.loc,
                [("first declared here", seen[decl.name].loc)],
            )
        seen[decl.name] = decl

    types = _read_types(reader, definition)
    for decl in inputs + outputs:
        if decl.dtype not in DTYPES and decl.dtype not in types:
            raise CatencError(
                f"unknown dtype '{decl.dtype}' for '{decl.name}'{closest(decl.dtype, list(DTYPES) + list(types))}; "
                f"dtypes are {' '.join(DTYPES)} or a variable declared in 'types'",
                decl.loc,
            )
    params = _read_params(reader, definition)
    derived, derived_locs, constraints = _read_where(reader, definition)
    body = reader.get(definition, "body", str, "a string")
    test = _read_test(reader, definition)
    comp = Composite(
        name, source, base, doc, inputs, outputs, types, derived, constraints, params, body, test, derived_locs
    )
    _read_constants(reader, definition, comp, seen, origin or Origin(".", "."))
    for symbol in comp.symbols():
        if symbol in seen:
            raise CatencError(f"'{symbol}' is both a tensor and a symbol (a dim) of '{name}'", seen[symbol].loc)
        if symbol in types:
            raise CatencError(f"'{symbol}' is both a symbol (a dim) and a type variable", comp.loc)
    for decl in inputs + outputs:
        for used in decl.symbol_order:
            value = params.get(used)
            if used in params and (isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_CONSTANT):
                raise CatencError(f"param '{used}' appears in a shape, so it must be an integer within 2^62", decl.loc)
    _check_test_ranges(reader, comp)
    return comp


def _read_constants(reader: _Reader, definition: dict, comp: Composite, seen: dict, origin: Origin) -> None:
    """The `constants` declarations and their values, from the `weights` file or from memory
    (docs/language.md, "Constants and weights files")."""
    raw = reader.get(definition, "constants", list, "a list of tensor declarations", [])
    comp.constants = [reader.decl(t, ("constants", i)) for i, t in enumerate(raw)]
    for decl in comp.constants:
        if decl.name in seen:
            raise CatencError(
                f"'{decl.name}' is declared twice", decl.loc, [("first declared here", seen[decl.name].loc)]
            )
        seen[decl.name] = decl
        if decl.name in comp.params:
            raise CatencError(f"'{decl.name}' is both a constant and a param of '{comp.name}'", decl.loc)
        if decl.dtype not in DTYPES:
            raise CatencError(
                f"constant '{decl.name}' needs a dtype{closest(decl.dtype, list(DTYPES))}, not '{decl.dtype}'; "
                f"dtypes are {' '.join(DTYPES)}",
                decl.loc,
            )
        if decl.batch or not all(d.is_const for d in decl.dims):
            raise CatencError(
                f"constant '{decl.name}' must have integer dims (its value has one shape), not {decl}", decl.loc
            )
    path = reader.get(definition, "weights", str, "the path of a safetensors file")
    tensors: dict[str, Tensor] = {}
    if path is not None:
        real = Path(origin.directory) / path
        display = path if Path(path).is_absolute() else _normalise(str(Path(origin.display).parent / path))
        try:
            tensors = read_weights(str(real))
        except WeightsError as err:
            raise CatencError(f"weights file '{path}': {err}", reader.loc("weights")) from None
        comp.weights_file = (display, str(real))
    elif comp.constants and origin.memory is None:
        raise CatencError(
            f"'constants' of '{comp.name}' need a 'weights' file holding their values",
            reader.source.key_loc(reader.base + ("constants",)),
        )
    for decl in comp.constants:
        comp.constant_values[decl.name] = _constant_value(decl, path, tensors, origin.memory)


def _constant_value(
    decl: TensorDecl, path: str | None, tensors: dict[str, Tensor], memory: Mapping[str, np.ndarray] | None
) -> np.ndarray:
    """A constant's value (storage form), checked against its declaration."""
    shape = tuple(d.value for d in decl.dims)
    dtype = DTYPES[decl.dtype]
    if memory is not None and decl.name in memory:
        value = np.asarray(memory[decl.name])
        if value.dtype != dtype.numpy or value.shape != shape:
            raise CatencError(
                f"constant '{decl.name}' is declared {decl.dtype}{list(shape)} but its value in memory is "
                f"{value.dtype}{list(value.shape)} (storage: {dtype.numpy})",
                decl.loc,
            )
        return value
    where = f"weights file '{path}'" if path is not None else "the values given in memory"
    tensor = tensors.get(decl.name)
    if tensor is None:
        raise CatencError(f"constant '{decl.name}' is not in {where}{closest(decl.name, list(tensors))}", decl.loc)
    if tensor.dtype is not DTYPES[decl.dtype] or tensor.shape != shape:
        raise CatencError(
            f"constant '{decl.name}' is declared {decl.dtype}{list(shape)} but {where} holds "
            f"{tensor.code}{list(tensor.shape)}",
            decl.loc,
        )
    return tensor.data


def _check_test_ranges(reader: _Reader, comp: Composite) -> None:
    """Each test.ranges key names an input, and its bounds use only the composite's symbols."""
    inputs = [d.name for d in comp.inputs]
    known = set(comp.symbols()) | set(comp.derived)
    for key, bounds in comp.test.get("ranges", {}).items():
        if key not in inputs:
            raise CatencError(
                f"test.ranges: '{key}' is not an input of '{comp.name}'{closest(key, inputs)}",
                reader.loc("test", "ranges", key),
            )
        for index, bound in enumerate(bounds):
            unknown = sorted(parse_expr(bound).free_symbols() - known) if isinstance(bound, str) else []
            if unknown:
                symbols = ", ".join(sorted(known)) or "none"
                raise CatencError(
                    f"test range of '{key}': '{unknown[0]}' is not a symbol of '{comp.name}' (symbols: {symbols})",
                    reader.loc("test", "ranges", key, index),
                )


def _read_types(reader: _Reader, definition: dict) -> dict[str, list[str]]:
    raw = reader.get(definition, "types", dict, "a table of TYPEVAR = [dtypes]", {})
    types: dict[str, list[str]] = {}
    for var, choices in raw.items():
        loc = reader.loc("types", var)
        check_name(var, "type variable", loc)
        if var in DTYPES:
            raise CatencError(f"type variable '{var}' shadows the dtype of that name", loc)
        if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
            raise CatencError(f"type variable '{var}' needs a non-empty list of dtype names", loc)
        for i, choice in enumerate(choices):
            if choice not in DTYPES:
                raise CatencError(
                    f"unknown dtype '{choice}'{closest(choice, list(DTYPES))}",
                    reader.loc("types", var, i),
                )
        types[var] = list(choices)
    return types


def _read_params(reader: _Reader, definition: dict) -> dict[str, bool | int | float]:
    raw = reader.get(definition, "params", dict, "a table of name = number or bool", {})
    params: dict[str, bool | int | float] = {}
    for key, value in raw.items():
        loc = reader.loc("params", key)
        check_name(key, "param", reader.source.key_loc(reader.base + ("params", key)))
        if not isinstance(value, (bool, int, float)):
            raise CatencError(f"param '{key}' must be a number or a bool, not {_describe(value)}", loc)
        params[key] = value
    return params


def _read_where(reader: _Reader, definition: dict) -> tuple[dict[str, Expr], dict[str, Loc], list[Constraint]]:
    raw = reader.get(definition, "where", list, "a list of strings", [])
    derived: dict[str, Expr] = {}
    derived_locs: dict[str, Loc] = {}
    constraints: list[Constraint] = []
    for i, text in enumerate(raw):
        path = ("where", i)
        if not isinstance(text, str):
            raise CatencError(f"a 'where' entry must be a string, not {_describe(text)}", reader.loc(*path))

        def loc_at(offset: int, path=path) -> Loc:
            return reader.source.string_loc(reader.base + path, offset)

        split = _split_constraint(text)
        if split is None:
            if "=" not in text:
                raise CatencError(
                    f"invalid 'where' entry '{text}': expected 'SYM = expr' or 'expr OP expr' "
                    "with OP one of == != < <= > >=",
                    loc_at(0),
                )
            lhs_text, rhs_text = text.split("=", 1)
            lhs_name = lhs_text.strip()
            lead = len(lhs_text) - len(lhs_text.lstrip())
            if not NAME_RE.match(lhs_name):
                raise CatencError(f"a derivation must assign a symbol, not '{lhs_name}'", loc_at(lead))
            if lhs_name in derived:
                raise CatencError(f"symbol '{lhs_name}' is derived twice", loc_at(lead))
            derived[lhs_name] = _parse_side(rhs_text, loc_at, len(lhs_text) + 1)
            derived_locs[lhs_name] = loc_at(lead)
            continue
        lhs_text, op, rhs_text, at = split
        lhs = _parse_side(lhs_text, loc_at, 0)
        rhs = _parse_side(rhs_text, loc_at, at + len(op))
        constraints.append(Constraint(lhs, op, rhs, " ".join(text.split()), loc_at(0)))
    order = list(derived)
    for k, (name, expr) in enumerate(derived.items()):
        if expr.free_symbols() & set(order[k:]):  # itself, or one derived after it: a cycle
            raise CatencError(f"'{name}' is derived from itself or from a symbol derived after it", derived_locs[name])
    return derived, derived_locs, constraints


def _parse_side(text: str, loc_at, offset: int) -> Expr:
    lead = len(text) - len(text.lstrip())
    try:
        value = parse_expr(text)
        if any(abs(c) > MAX_CONSTANT for _, c in value.terms):
            raise CatencError(f"'{text.strip()}' has a constant beyond 2^62", loc_at(offset + lead))
        return value
    except SymbolicSyntaxError as err:
        raise CatencError(f"invalid integer expression '{text.strip()}'", loc_at(offset + lead + err.col)) from None


def _read_test(outer: _Reader, definition: dict) -> dict:
    raw = outer.get(definition, "test", dict, "a table", {})
    reader = _Reader(outer.source, outer.base + ("test",))
    for key in raw:
        if key not in TEST_KEYS:
            raise CatencError(
                f"unknown key '{key}' in 'test'{closest(key, TEST_KEYS)}; valid keys are {', '.join(TEST_KEYS)}",
                reader.source.key_loc(reader.base + (key,)),
            )
    sizes = reader.get(raw, "sizes", dict, "a table of symbol = int", {})
    for key, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise CatencError(
                f"test size '{key}' must be a non-negative integer",
                reader.loc("sizes", key),
            )
    for key in ("rtol", "atol"):
        if key in raw and (not isinstance(raw[key], (int, float)) or isinstance(raw[key], bool)):
            raise CatencError(f"'{key}' must be a number", reader.loc(key))
    if "reference" in raw and not isinstance(raw["reference"], str):
        raise CatencError("'reference' must be a string of Python source", reader.loc("reference"))
    ranges = reader.get(raw, "ranges", dict, "a table of input = [low, high]", {})
    for key, bounds in ranges.items():
        ok = isinstance(bounds, list) and len(bounds) == 2
        for bound in bounds if ok else ():
            if isinstance(bound, str):
                try:
                    parse_expr(bound)
                except SymbolicSyntaxError:
                    ok = False
            elif isinstance(bound, bool) or not isinstance(bound, (int, float)):
                ok = False
        if not ok:
            raise CatencError(
                f"test range of '{key}' must be [low, high] (numbers or expressions of symbols such as \"V\")",
                reader.loc("ranges", key),
            )
    return raw


# ---- files and the search path -----------------------------------------------------------------


@dataclass
class CompositeFile:
    """One loaded file with its includes, in order."""

    source: SourceFile
    composites: dict[str, Composite]
    includes: list[CompositeFile]
    real_path: str = ""


def load_composite_file(path: str, display: str | None = None, _stack: tuple[str, ...] = ()) -> CompositeFile:
    key = (os.path.abspath(path), path, display, _stack)
    remembered = _LOADED.get(key)
    if remembered is not None and _unchanged(remembered):
        _LOADED.move_to_end(key)
        for file in _walk(remembered.file):
            remember_source(file.source.path, file.source.text)
        return remembered.file
    file = _composite_file(load_source(path, display), path, display or path, _stack)
    parts = list(itertools.islice(_walk(file), _LOADED_FILES + 1))
    if len(parts) <= _LOADED_FILES and not any(
        comp.weights_file for part in parts for comp in part.composites.values()
    ):
        _LOADED[key] = _Loaded(file, tuple((part.real_path, part.source.text.encode()) for part in parts))
        while len(_LOADED) > _LOADED_LIMIT:
            _LOADED.popitem(last=False)
    return file


@dataclass(frozen=True)
class _Loaded:
    """A parsed file and the bytes of every file it was parsed from (itself and its includes)."""

    file: CompositeFile
    contents: tuple[tuple[str, bytes], ...]


# Parsed files by (absolute path, path, display, include stack), most recently used last. Parsing is a pure
# function of the files' bytes and nothing changes a parsed file, so one process (test-runtime,
# a tuner, a test suite) parses the op library once rather than once per compile. A file whose
# composites read a weights file is parsed every time, and so is one with more than _LOADED_FILES
# files in its includes (checking them all on every lookup of a deep chain costs its square).
_LOADED: OrderedDict[tuple[str, str, str | None, tuple[str, ...]], _Loaded] = OrderedDict()
_LOADED_LIMIT = 256
_LOADED_FILES = 64


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _unchanged(loaded: _Loaded) -> bool:
    return all(_read(path) == content for path, content in loaded.contents)


def composite_file_from_text(text: str, display: str, constants: Mapping[str, np.ndarray]) -> CompositeFile:
    """A composite file given as TOML text, named `display` (paths in it are relative to the
    display's directory), whose composites' constants take their values from `constants` (name ->
    storage-form array) before any `weights` file."""
    source = source_from_text(text, display)
    return _composite_file(source, display, display, (), constants)


def _composite_file(
    source: SourceFile,
    path: str,
    display: str,
    _stack: tuple[str, ...],
    memory: Mapping[str, np.ndarray] | None = None,
) -> CompositeFile:
    data = source.data
    for key in data:
        if key not in TOP_KEYS:
            raise CatencError(
                f"unknown top-level key '{key}'{closest(key, TOP_KEYS)}; valid keys are composite, include",
                source.key_loc((key,)),
            )
    includes: list[CompositeFile] = []
    raw_includes = data.get("include", [])
    if not isinstance(raw_includes, list):
        raise CatencError("'include' must be a list of paths", source.loc(("include",)))
    resolved = str(Path(path).resolve())
    for i, item in enumerate(raw_includes):
        loc = source.loc(("include", i))
        if not isinstance(item, str):
            raise CatencError("an include must be a path string", loc)
        try:
            target = Path(path).parent / item
            target_display = str(Path(display or path).parent / item) if not Path(item).is_absolute() else item
            if str(target.resolve()) in _stack + (resolved,):
                raise CatencError(f"include cycle: '{item}' includes this file again", loc)
            if not target.is_file():
                raise CatencError(f"cannot find included file '{item}'", loc)
        except (OSError, ValueError, RuntimeError) as err:  # NUL bytes, symlink loops, long names
            raise CatencError(f"cannot include '{item}': {err}", loc) from None
        includes.append(load_composite_file(str(target), _normalise(target_display), _stack + (resolved,)))
    composites: dict[str, Composite] = {}
    table = data.get("composite")
    if table is None and not includes:
        raise CatencError("no 'composite' table in this file", Loc(source.path, 1, 1))
    if table is not None:
        if not isinstance(table, dict):
            raise CatencError("'composite' must be a table of composite definitions", source.loc(("composite",)))
        for name, definition in table.items():
            composites[name] = parse_composite(
                source, name, definition, Origin(str(Path(path).parent), display, memory)
            )
    return CompositeFile(source, composites, includes, path)


def _normalise(path: str) -> str:
    parts: list[str] = []
    for piece in Path(path).parts:
        if piece == ".." and parts and parts[-1] != "..":
            parts.pop()
        elif piece != ".":
            parts.append(piece)
    return str(Path(*parts)) if parts else "."


def all_composites(root: CompositeFile) -> dict[str, Composite]:
    """The composites of a file and its includes; a name defined twice is an error."""
    out: dict[str, Composite] = {}
    for file in _walk(root):
        for name, comp in file.composites.items():
            if name in out:
                raise CatencError(
                    f"composite '{name}' is defined twice",
                    comp.loc,
                    [("first defined here", out[name].loc)],
                )
            out[name] = comp
    return out


def _read_by(file: CompositeFile) -> Iterator[tuple[str, str]]:
    """(display path, path on disk) of a file and of the weights files its composites read."""
    yield file.source.path, file.real_path
    for comp in file.composites.values():
        if comp.weights_file is not None:
            yield comp.weights_file


def _walk(root: CompositeFile) -> Iterator[CompositeFile]:
    """The file and its includes, depth first in include order (without nested generators, whose
    cost per file grows with the depth: include chains a thousand files deep are legal)."""
    stack = [root]
    while stack:
        file = stack.pop()
        yield file
        stack.extend(reversed(file.includes))


class Library:
    """Finds composites: the compiled file and its includes, then `-I` dirs, then `ops/`."""

    def __init__(self, root: CompositeFile, search_dirs: list[tuple[str, str]]):
        """search_dirs: (directory on disk, display prefix) in search order."""
        self.root = root
        self.local = all_composites(root)
        self.search_dirs = search_dirs
        self._dir_cache: dict[str, dict[str, Composite]] = {}
        # Internal names (reserved catenc_ prefix) that reach a composite whatever its name: how
        # test-runtime calls a library op named like a built-in function (relu, sum, ...).
        self.aliases: dict[str, Composite] = {}
        self._dir_files: dict[str, list[CompositeFile]] = {}
        self.files_read: dict[str, str] = dict(pair for f in _walk(root) for pair in _read_by(f))
        """display path -> path on disk, of every file read, in order"""
        self.dirs_read: dict[str, list[str]] = {}
        """search directory -> paths on disk of every file parsed from it (includes too), for the
        directories searched so far: the compile cache checks them and the directory's listing"""

    def find(self, name: str) -> Composite | None:
        if name in self.aliases:
            return self.aliases[name]
        if name in self.local:
            return self.local[name]
        for directory, display in self.search_dirs:
            found = self._load_dir(directory, display).get(name)
            if found is not None:
                for file in self._dir_files[found.source.path]:
                    for display_path, real in _read_by(file):
                        self.files_read.setdefault(display_path, real)
                return found
        return None

    def _load_dir(self, directory: str, display: str) -> dict[str, Composite]:
        if directory not in self._dir_cache:
            found: dict[str, Composite] = {}
            parsed = self.dirs_read.setdefault(directory, [])
            for path in sorted(Path(directory).glob("*")):
                if path.suffix not in (".toml", ".yaml", ".yml"):
                    continue
                file = load_composite_file(str(path), f"{display}/{path.name}")
                for part in _walk(file):
                    self._dir_files[part.source.path] = list(_walk(file))
                    parsed += [real for _, real in _read_by(part)]
                for name, comp in all_composites(file).items():
                    found.setdefault(name, comp)
            self._dir_cache[directory] = found
        return self._dir_cache[directory]
