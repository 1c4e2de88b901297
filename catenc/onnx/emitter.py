"""The body being written while a model is imported: names for ONNX values, the statements, the
constants, and the constraints the converters need (the API converters use; docs/onnx.md).
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Sequence

import numpy as np

from catenc.diagnostics import CatencError
from catenc.frontend.composites import check_name
from catenc.frontend.shapes import SHAPE_FUNCS
from catenc.onnx.builder import Index, Lit, Node, Ref, check_scope, dim_text, render
from catenc.onnx.errors import Unsupported
from catenc.onnx.folding import compact, place, repeats
from catenc.onnx.model import file_loc
from catenc.onnx.values import ONNX_DTYPES, Shape, Value, dims, literal
from catenc.registry import ELEMENTWISE, REDUCTIONS

RESERVED = (
    ELEMENTWISE
    | SHAPE_FUNCS
    | frozenset(REDUCTIONS)
    | frozenset(("argmax", "argmin", "inf", "nan", "pi", "True", "False", "None"))
    | frozenset(ONNX_DTYPES.values())
)


class Names:
    """Body-language names from ONNX names: valid, unique, and hiding no function the body calls."""

    def __init__(self, reserved: frozenset[str] = frozenset()) -> None:
        self.taken: set[str] = set(reserved)

    def fresh(self, onnx_name: str, what: str = "tensor") -> str:
        base = sanitise(onnx_name)
        name, n = base, 1
        while name in self.taken or not usable(name, what):
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name


def sanitise(onnx_name: str) -> str:
    text = re.sub(r"_output_0$", "", onnx_name)
    text = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")
    if not text:
        return "t"
    return f"t{text}" if text[0].isdigit() else text


def usable(name: str, what: str) -> bool:
    if name in RESERVED or keyword.iskeyword(name) or name.lower().startswith("catenc"):
        return False
    try:
        check_name(name, what, file_loc(""))
    except CatencError:
        return False
    return True


class IndexNames:
    """Index names for one index-form statement: each clashes with no tensor, symbol or function
    of the body, now or later (it is reserved in the body's names; indices of other statements
    may reuse it), nor with the statement's other indices."""

    def __init__(self, names: Names, ours: set[str]) -> None:
        self.names = names
        self.ours = ours  # every index name of the body so far
        self.local: set[str] = set()

    def __call__(self, name: str) -> Index:
        while name in self.local or (name in self.names.taken and name not in self.ours):
            name += "_"
        self.names.taken.add(name)
        self.ours.add(name)
        self.local.add(name)
        return Index(name)

    def numbered(self, count: int) -> list[Index]:
        """`count` indices i0, i1, ...: call it after the statement's operands have their names."""
        return [self(f"i{n}") for n in range(count)]


class Emitter:
    """The body being written: converters add statements and constants through it."""

    def __init__(self, names: Names) -> None:
        self.names = names
        self.lines: list[str] = []
        self._index_names: set[str] = set()  # every index name given out (IndexNames)
        self.constants: dict[str, tuple[str, np.ndarray]] = {}  # name -> (dtype, value)
        self._constant_names: dict[int, str] = {}  # id of a known array -> its constant
        self._hints: dict[int, str] = {}  # id of a known array -> the ONNX name it came with
        self._arrays: list[np.ndarray] = []  # keeps the arrays behind those ids alive
        self.constraints: list[str] = []  # `where` constraints the converters need (docs/language.md)
        self.outputs: tuple[str, ...] = ()  # the current node's output names
        self.output_names: dict[str, str] = {}  # ONNX name -> body name, fixed up front for graph outputs
        self.op = ""  # the current node's operator
        self.elementwise = False  # whether the current node reads its inputs elementwise
        self.notes: list[str] = []  # where each constant value is computed (folding.py), in order

    def mark(self) -> tuple[int, ...]:
        """The body so far, for `rollback`."""
        tables = (self.lines, self.constants, self._constant_names, self.constraints, self.notes)
        return tuple(len(t) for t in tables)

    def rollback(self, mark: tuple[int, ...]) -> None:
        """Forget what was written since `mark` (a node computed at import after all); names stay taken."""
        lines, constants, names, constraints, notes = mark
        for table, size in ((self.constants, constants), (self._constant_names, names)):
            for key in list(table)[size:]:
                del table[key]
        del self.lines[lines:], self.constraints[constraints:], self.notes[notes:]

    def text(self, value: Value) -> str:
        """The body expression of a value: its name, a literal, or a constant."""
        if value.name is not None:
            return value.name
        array = value.known
        if array.ndim == 0:
            return literal(array.item(), value.dtype)
        if array.dtype == object:
            return self.symbolic_vector(value)
        if repeats(array):
            return self.broadcast(value)
        return self.constant(array, value.dtype)

    def broadcast(self, value: Value) -> str:
        """A known broadcast (a fill, an Expand of a known tensor): stored as a constant, or repeated
        by the library where it is read (folding.place)."""
        array = value.known
        found = self._constant_names.get(id(array))
        if found is not None:
            return found
        decision = place(self.op, array.size, (value.dtype,), True, self.elementwise)
        hint = self._hints.get(id(array), "c")
        self.notes.append(decision.note(f"{hint} {value.dtype}[{', '.join(map(str, array.shape))}], read by {self.op}"))
        if decision.at_import:
            return self.constant(np.ascontiguousarray(array), value.dtype, hint, key=array)
        data = compact(array)
        shape = ", ".join(map(str, array.shape))
        if data.size == 1:
            expr = f"full([{shape}], {literal(data.item(), value.dtype)}, {value.dtype})"
        else:
            source = self.constant(np.ascontiguousarray(data), value.dtype, hint + "_data")
            expr = f"expand({source}, [{shape}])"
        name = self.names.fresh(hint)
        self.lines.append(f"{name} = {expr}")
        self._constant_names[id(array)] = name
        self._arrays.append(array)
        return name

    def ref(self, value: Value) -> Node:
        """The value as an expression: its tensor, a literal, or a constant (as `text`)."""
        text = self.text(value)
        if value.name is None and value.known.ndim == 0:
            return Lit(text, value.dtype)
        return Ref(text, value.dtype, value.shape)

    def index_names(self) -> IndexNames:
        """Fresh index names for one index-form statement."""
        return IndexNames(self.names, self._index_names)

    def symbolic_vector(self, value: Value) -> str:
        """A known vector with symbolic entries (a shape) as data: `v[i < n] = where(i == 0, N, ...)`."""
        entries = list(value.known.reshape(-1))
        if value.known.ndim != 1 or not entries:
            raise Unsupported("a shape computed from symbolic sizes is used as tensor data")
        expr = literal(entries[-1], value.dtype)
        for i in range(len(entries) - 2, -1, -1):
            expr = f"where(i == {i}, {literal(entries[i], value.dtype)}, {expr})"
        name = self.names.fresh("shape")
        self.lines.append(f"{name}[i < {len(entries)}] = cast({expr}, {value.dtype})")
        return name

    def constant(self, array: np.ndarray, dtype: str, hint: str = "c", key: np.ndarray | None = None) -> str:
        """`array` as a constant of the composite, once per `key` (the array itself by default)."""
        key = array if key is None else key
        found = self._constant_names.get(id(key))
        if found is not None:
            return found
        name = self.names.fresh(self._hints.get(id(key), hint))
        self.constants[name] = (dtype, array)
        self._constant_names[id(key)] = name
        self._arrays += [array, key]
        return name

    def constant_ref(self, array: np.ndarray, dtype: str, hint: str = "c") -> Ref:
        """A constant (see `constant`) as an expression."""
        return Ref(self.constant(array, dtype, hint), dtype, dims(array.shape))

    def hint_like(self, value: Value, origin: Value, suffix: str) -> None:
        """Name the constant of `value` (computed from `origin` at import) after origin's name."""
        if origin.known is not None and id(origin.known) in self._hints:
            self.hint(value, self._hints[id(origin.known)] + suffix)

    def hint(self, value: Value, onnx_name: str) -> None:
        """Name the constant of a known value after `onnx_name`, should the body ever use it."""
        if value.known is not None:
            self._hints.setdefault(id(value.known), onnx_name)
            self._arrays.append(value.known)

    def require(self, constraint: str) -> None:
        """A constraint on the symbols (`H + 2 >= 3`) the program needs, checked by the entry at run
        time (CATENC_E_SHAPE when it fails) and usable by catenc's proofs."""
        if constraint not in self.constraints:
            self.constraints.append(constraint)

    def out(self, expr: str | Node, dtype: str, shape: Shape, k: int = 0) -> Value:
        """`expr` as the node's k-th output (named after it)."""
        name = self._output_name(k)
        self.lines.append(f"{name} = {_array_text(expr)}")
        return Value(dtype, shape, name)

    def result(self, expr: Node, k: int = 0, shape: Shape | None = None) -> Value:
        """A built expression as the node's k-th output, of its dtype and (unless given) its shape."""
        return self.out(expr, expr.dtype, expr.shape if shape is None else shape, k)

    def intermediate(self, expr: Node, hint: str = "t", shape: Shape | None = None) -> Value:
        """A built expression as an intermediate of the node (see `temp`)."""
        return self.temp(expr, expr.dtype, expr.shape if shape is None else shape, hint)

    def _output_name(self, k: int) -> str:
        onnx_name = self.outputs[k] if k < len(self.outputs) and self.outputs[k] else "t"
        return self.output_names.get(onnx_name) or self.names.fresh(onnx_name)

    def temp(self, expr: str | Node, dtype: str, shape: Shape, hint: str = "t") -> Value:
        """`expr` as an intermediate of the node, named after its first output and `hint`."""
        name = self._temp_name(hint)
        self.lines.append(f"{name} = {_array_text(expr)}")
        return Value(dtype, shape, name)

    def _temp_name(self, hint: str) -> str:
        base = self.outputs[0] if self.outputs and self.outputs[0] else "t"
        return self.names.fresh(f"{sanitise(base)}_{hint}")

    def out_index(
        self, indices: Sequence[str | Index], expr: str | Node, dtype: str, shape: Shape, k: int = 0
    ) -> Value:
        """An index-form statement `name[i < D0, j < D1, ...] = expr` as the node's k-th output."""
        name = self._output_name(k)
        self.lines.append(f"{name}[{_ranges(indices, shape)}] = {_index_text(indices, expr)}")
        return Value(dtype, shape, name)

    def index_temp(
        self, indices: Sequence[str | Index], expr: str | Node, dtype: str, shape: Shape, hint: str = "t"
    ) -> Value:
        """An intermediate in index form, `name[i < D0, ...] = expr`."""
        name = self._temp_name(hint)
        self.lines.append(f"{name}[{_ranges(indices, shape)}] = {_index_text(indices, expr)}")
        return Value(dtype, shape, name)

    @staticmethod
    def comment(text: str) -> str:
        return "# " + re.sub(r"[^\x20-\x7e]", "?", text).replace("'''", "'' '")


def _name(index: str | Index) -> str:
    return index.name if isinstance(index, Index) else index


def _ranges(indices: Sequence[str | Index], shape: Shape) -> str:
    return ", ".join(f"{_name(i)} < {dim_text(d)}" for i, d in zip(indices, shape, strict=True))


def _array_text(expr: str | Node) -> str:
    """An array-form statement's right side: a built one may use no index."""
    if isinstance(expr, str):
        return expr
    check_scope(expr, frozenset())
    return render(expr)


def _index_text(indices: Sequence[str | Index], expr: str | Node) -> str:
    """An index-form statement's right side: a built one may use the statement's indices only."""
    if isinstance(expr, str):
        return expr
    check_scope(expr, frozenset(_name(i) for i in indices))
    return render(expr)
