"""Load a library compiled by catenc and call its entries from Python.

``catenc compile`` writes a C library together with its build manifest,
``model.manifest.json`` (docs/abi.md), which describes every entry function: its C
symbol, its arguments in C order, their dtypes and symbolic shapes. This module reads the
manifest, opens the shared library with :mod:`ctypes` and wraps each entry in a callable
that takes and returns numpy arrays::

    from catenc.loader import load

    lib = load("build/model.manifest.json")  # or the directory that holds it
    gemm = lib["gemm"]                        # or lib.gemm
    C = gemm(A, B)                            # M, N, K inferred from A.shape and B.shape
    gemm.bind(A, B)                           # {'M': 64, 'K': 32, 'N': 16}
    gemm.workspace_bytes(M=64, N=16, K=32)    # what gemm_workspace_bytes() returns

Arrays are in the storage representation of the C ABI (docs/abi.md): ``bool`` is
``np.bool_`` (one byte, 0/1), ``f16`` is ``np.float16``. A ``bf16`` result is an
``ml_dtypes.bfloat16`` array where the ml_dtypes package is installed (onnx, JAX and TensorFlow
bring it), else ``np.uint16`` holding the bfloat16 bits; :func:`catenc.dtypes.from_storage` turns
either into float32.

Symbols: a *free* symbol is an ``int64_t`` argument of the C function (``Entry.dims``); a
*derived* symbol is computed from the free ones (``where: H = 4*D``); a *specialized* one
was fixed at compile time (``-D N=64``). Free symbols are inferred from the shapes of the
inputs; one that appears only in output shapes is given as a keyword: ``iota(N=10)``.

Input dtypes: an array is converted to its input's dtype when that keeps the kind of its
values; the kinds are ordered bool < integer < floating (signed and unsigned integers are one
kind), and an array may be passed for an input of its own kind or a higher one. So int arrays
and Python ints are accepted for float inputs, any int dtype for any int input (converted as
numpy's ``astype``: -1 given for u64 is 2**64 - 1), and f64 for f32, f16 or bf16; but a float
array for an integer input (it would be truncated), a complex array for a real one (the
imaginary part would be lost), an int array for a bool input, or an object or string array
raise TypeError. This is numpy's ``np.can_cast(..., casting="same_kind")``, except that
signed to unsigned integers is allowed. A uint16 array for an f16 or bf16 input is taken as
the bits; an ``ml_dtypes.bfloat16`` array is a float array, its bits taken as they are for a
bf16 input.

Sizes: an entry returns ``CATENC_E_SHAPE`` when a size its code computes from the dims (an
element count, a byte count, a loop extent) overflows int64, and its ``NAME_workspace_bytes``
returns ``SIZE_MAX`` for such dims; a call through :meth:`Entry.__call__` raises
:class:`CatencStatusError` with ``code == "CATENC_E_SHAPE"`` before allocating anything.

Every call allocates its own outputs and workspace, so one entry may be called from several
threads at once; ctypes releases the GIL while the C function runs.

External weights: an entry built with ``--weights external`` takes its constants through one
``weights`` argument, the data section of the build's safetensors file (docs/abi.md). The
library maps that file once, at the first call, checks it against the layout the library was
compiled for and passes the pointer itself: a call takes the declared inputs only.
``load(path, weights=other)`` reads another file of the same layout.

Builds of the GPU runtimes load too (:mod:`catenc.runtime.device_host`): an ``opencl`` build runs
through pyopencl on this machine's OpenCL device, a ``cuda`` build on its GPU; the entries
take and return host arrays and copy them to and from the device. Loading a build that
cannot run here (``cuda`` without a GPU, another language) raises
:class:`UnsupportedRuntimeError`.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from catenc.dtypes import DTYPES, DType, is_bfloat16, numpy_bfloat16, to_storage
from catenc.runtime.conventions import CALLING_CONVENTIONS
from catenc.runtime.manifest import (
    HOST_LANGUAGES,
    SIZE_MAX,
    WORKSPACE_ALIGNMENT,
    ManifestError,
    Scope,
    ShapeExpr,
    UnsupportedRuntimeError,
)
from catenc.runtime.weights_data import PackedWeights, WeightsData, aligned_buffer

__all__ = [
    "MANIFEST_NAME",
    "MANIFEST_SCHEMA",
    "SIZE_MAX",
    "STATUS_NAMES",
    "WORKSPACE_ALIGNMENT",
    "ArgSpec",
    "CatencStatusError",
    "Entry",
    "Library",
    "ManifestError",
    "ShapeError",
    "ShapeExpr",
    "UnsupportedRuntimeError",
    "aligned_buffer",
    "load",
]

MANIFEST_NAME = "model.manifest.json"
MANIFEST_SCHEMA = "catenc.manifest/1"

STATUS_NAMES: dict[int, str] = {
    0: "CATENC_OK",
    1: "CATENC_E_SHAPE",
    2: "CATENC_E_WORKSPACE",
    3: "CATENC_E_INDEX",
    4: "CATENC_E_DEVICE",
}
_STATUS_MEANINGS = {
    1: "a shape constraint failed",
    2: "the workspace is too small or not 64-byte aligned",
    3: "an index is out of range",
    4: "a device launch or copy failed",
}

_INT64_MAX = 2**63 - 1

_CTYPES: dict[str, type] = {
    "uint8_t": ctypes.c_uint8,
    "int8_t": ctypes.c_int8,
    "int16_t": ctypes.c_int16,
    "int32_t": ctypes.c_int32,
    "int64_t": ctypes.c_int64,
    "uint16_t": ctypes.c_uint16,
    "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
}

_ARG_ROLES = ("input", "weights", "packed_weights", "output", "dim", "workspace", "workspace_bytes")


# --------------------------------------------------------------------------- errors


class ShapeError(ValueError):
    """An argument's shape does not match the shape its entry declares."""


class CatencStatusError(RuntimeError):
    """An entry returned a nonzero status.

    Attributes: ``status`` (the int the C function returned), ``name`` (the entry) and
    ``code`` (``"CATENC_E_SHAPE"``, ``"CATENC_E_WORKSPACE"``, ``"CATENC_E_INDEX"``).
    """

    def __init__(self, status: int, name: str, detail: str = "") -> None:
        super().__init__(status, name, detail)
        self.status = status
        self.name = name
        self.detail = detail
        self.code = STATUS_NAMES.get(status, "unknown status")

    def __str__(self) -> str:
        message = f"{self.name} returned {self.code} ({self.status})"
        meaning = _STATUS_MEANINGS.get(self.status)
        if meaning:
            message += f": {meaning}"
        if self.detail:
            message += f" ({self.detail})"
        return message


# -------------------------------------------------------------------------- buffers


def _to_buffer(value: np.ndarray, dtype: DType) -> np.ndarray:
    """value in dtype's storage representation, C-contiguous, with value's shape.

    For f16 and bf16 a uint16 array is taken as the bits; other arrays are converted
    (bf16 rounded to nearest even, an ml_dtypes bfloat16 array's bits kept).
    """
    if dtype.is_half and value.dtype == np.uint16:
        buffer = np.ascontiguousarray(value).view(dtype.numpy)
    else:
        buffer = to_storage(value, dtype)
    return buffer.reshape(value.shape)


# The kinds of values, in the order an input may widen them (catenc has no complex dtype).
_KIND_RANKS = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def _check_kind(entry: str, spec: ArgSpec, value: np.ndarray) -> None:
    """Raise TypeError unless value's dtype converts to spec's without changing the kind of
    its values (see the module doc: bool < integer < floating)."""
    dtype = spec.dtype
    if dtype.is_half and value.dtype == np.uint16:
        return  # the f16 or bf16 bits
    target = 0 if dtype.name == "bool" else 2 if dtype.is_float else 1
    rank = _KIND_RANKS["f"] if is_bfloat16(value) else _KIND_RANKS.get(value.dtype.kind)
    if rank is None or rank > target:
        raise TypeError(
            f"{entry}: input {spec.name!r} is {dtype.name}: a {value.dtype} array would lose the kind of its "
            "values converted to it (allowed: bool -> integer -> float); convert it explicitly with .astype"
        )


def _result_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype a result of this dtype is returned in: ml_dtypes' bfloat16 for bf16
    where installed, else the storage dtype."""
    bfloat16 = numpy_bfloat16() if dtype.name == "bf16" else None
    return dtype.numpy if bfloat16 is None else bfloat16


def _pointer(value: Any) -> int | None:
    """The address call_raw passes for a buffer argument."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return value.ctypes.data
    if isinstance(value, int):
        return value
    if isinstance(value, ctypes.c_void_p):
        return value.value
    raise TypeError(f"expected a numpy array, an address or None, got {type(value).__name__}")


def _as_dim(name: str, value: Any) -> int:
    """value checked as the value of symbol name: an int in [0, 2**63)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"symbol {name} must be an int, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"symbol {name} must be an int, got {value!r}") from None
    if not 0 <= number <= _INT64_MAX:
        raise ValueError(f"symbol {name} must be a non-negative int64, got {number}")
    return number


# -------------------------------------------------------------------------- entries


def _c_function(cdll: ctypes.CDLL, symbol: str, argtypes: list, restype: Any, where: str) -> Any:
    """The library's function `symbol`, typed; ManifestError when the library has none."""
    try:
        function = cdll[symbol]
    except AttributeError:
        raise ManifestError(f"{where}: the library has no symbol {symbol!r}") from None
    function.argtypes = argtypes
    function.restype = restype
    return function


@dataclass(frozen=True)
class ArgSpec:
    """A tensor argument of an entry, as the manifest declares it.

    ``shape`` holds ints and expression strings (``("M", "2*K")``); ``()`` is a scalar,
    passed by value when it is an input and by pointer when it is an output.
    """

    name: str
    role: str
    dtype: DType
    shape: tuple[int | str, ...]
    exprs: tuple[ShapeExpr, ...] = field(repr=False, compare=False)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        if not self.shape:
            return f"{self.name}: {self.dtype.name}"
        return f"{self.name}: {self.dtype.name}[{', '.join(map(str, self.shape))}]"


def _required(mapping: Mapping[str, Any], key: str, where: str) -> Any:
    if not isinstance(mapping, Mapping) or key not in mapping:
        raise ManifestError(f"{where}: missing key {key!r}")
    return mapping[key]


def _arg_spec(arg: Mapping[str, Any], role: str, where: str) -> ArgSpec:
    name = _required(arg, "name", where)
    dtype_name = _required(arg, "dtype", f"{where}: argument {name!r}")
    if dtype_name not in DTYPES:
        raise ManifestError(f"{where}: argument {name!r} has unknown dtype {dtype_name!r}")
    shape = _required(arg, "shape", f"{where}: argument {name!r}")
    if not isinstance(shape, list):
        raise ManifestError(f"{where}: argument {name!r}: shape must be a list, got {shape!r}")
    try:
        exprs = tuple(ShapeExpr(dim) for dim in shape)
    except ManifestError as error:
        raise ManifestError(f"{where}: argument {name!r}: {error}") from None
    return ArgSpec(name, role, DTYPES[dtype_name], tuple(shape), exprs)


class Entry:
    """One entry function of a loaded library, callable with numpy arrays.

    Attributes: ``name``; ``symbol`` (the C function); ``inputs`` and ``outputs``
    (:class:`ArgSpec` lists, declared order); ``dims`` (the free symbols, which are the
    ``int64_t`` arguments, in C order); ``derived`` and ``specialized`` (symbol -> expression
    / value); ``constraints``; ``spec`` (the manifest's entry).
    """

    def __init__(self, spec: Mapping[str, Any], cdll: ctypes.CDLL, *, trailing: tuple[str, ...] = ()) -> None:
        where = f"entry {spec.get('name', '?')!r}" if isinstance(spec, Mapping) else "entry"
        self.spec = spec
        self.name: str = _required(spec, "name", where)
        self.symbol: str = spec.get("symbol", self.name)
        self.inputs: list[ArgSpec] = []
        self.outputs: list[ArgSpec] = []
        self.dims: list[str] = []
        self.derived: dict[str, str] = dict(spec.get("derived") or {})
        self.specialized: dict[str, int] = dict(spec.get("specialized") or {})
        self.constraints: list[str] = list(spec.get("constraints") or [])
        self._cdll = cdll  # keeps the library loaded as long as the entry lives
        self._trailing = trailing
        self.weights: Mapping[str, Any] | None = None  # the manifest's `weights` argument (--weights external)
        self._weights_data: Callable[[], int] | None = None  # the address of the weights data (Library sets it)

        self._roles: list[tuple[str, ArgSpec | None]] = []
        argtypes: list[type] = []
        for arg in _required(spec, "args", where):
            role = _required(arg, "role", where)
            if role in ("input", "output"):
                arg_spec = _arg_spec(arg, role, where)
                (self.inputs if role == "input" else self.outputs).append(arg_spec)
                self._roles.append((role, arg_spec))
                by_value = role == "input" and arg_spec.rank == 0
                argtypes.append(_CTYPES[arg_spec.dtype.ctype] if by_value else ctypes.c_void_p)
            elif role in ("weights", "packed_weights"):
                self.weights = arg
                self._roles.append((role, None))
                argtypes.append(ctypes.c_void_p)
            elif role == "dim":
                dim_name = _required(arg, "name", where)
                if arg.get("ctype", "int64_t") != "int64_t":
                    raise ManifestError(f"{where}: dim {dim_name!r} must be int64_t")
                self.dims.append(dim_name)
                self._roles.append((role, None))
                argtypes.append(ctypes.c_int64)
            elif role == "workspace":
                self._roles.append((role, None))
                argtypes.append(ctypes.c_void_p)
            elif role == "workspace_bytes":
                self._roles.append((role, None))
                argtypes.append(ctypes.c_size_t)
            elif role in trailing:  # the calling convention's own (CUDA's stream): None, the default
                self._roles.append((role, None))
                argtypes.append(ctypes.c_void_p)
            else:
                raise ManifestError(f"{where}: argument role {role!r} is not one of {', '.join(_ARG_ROLES)}")

        self._derived_exprs = self._parse_symbols(where)
        workspace = spec.get("workspace_bytes")
        try:
            self._workspace_expr = None if workspace is None else ShapeExpr(workspace)
        except ManifestError as error:
            raise ManifestError(f"{where}: workspace_bytes: {error}") from None
        self._check_names(where)
        self._constraint_exprs = self._parse_constraints()
        self._deps = {e.source: self._free_deps(e) for a in self.inputs for e in a.exprs}

        self._function = _c_function(cdll, self.symbol, argtypes, ctypes.c_int, where)
        workspace_symbol = spec.get("workspace_symbol")
        sizes = [ctypes.c_int64] * len(self.dims)
        self._size_function = (
            _c_function(cdll, workspace_symbol, sizes, ctypes.c_size_t, where) if workspace_symbol else None
        )
        threads_symbol = spec.get("threads_symbol")
        self._threads_function = (
            _c_function(cdll, threads_symbol, [ctypes.c_int], None, where) if threads_symbol else None
        )

    # ------------------------------------------------------------- manifest checks

    def _parse_symbols(self, where: str) -> dict[str, ShapeExpr]:
        for name, value in self.specialized.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ManifestError(f"{where}: specialized {name} must be an int >= 0")
        try:
            derived = {name: ShapeExpr(expr) for name, expr in self.derived.items()}
        except ManifestError as error:
            raise ManifestError(f"{where}: derived: {error}") from None
        overlap = (set(self.dims) & set(derived)) | (set(self.specialized) & set(derived))
        overlap |= set(self.dims) & set(self.specialized)
        if overlap:
            raise ManifestError(f"{where}: symbols {sorted(overlap)} are declared twice")
        return derived

    def _check_names(self, where: str) -> None:
        known = set(self.dims) | set(self._derived_exprs) | set(self.specialized)
        exprs = [(f"argument {a.name!r}", e) for a in self.inputs + self.outputs for e in a.exprs]
        exprs += [(f"derived {name}", e) for name, e in self._derived_exprs.items()]
        if self._workspace_expr is not None:
            exprs.append(("workspace_bytes", self._workspace_expr))
        for what, expr in exprs:
            unknown = expr.names - known
            if unknown:
                raise ManifestError(f"{where}: {what}: {expr} uses unknown symbols {sorted(unknown)}")
        for name in self._derived_exprs:  # a cycle would never finish
            self._free_deps(self._derived_exprs[name], chain=(name,))

    def _parse_constraints(self) -> list[ShapeExpr | None]:
        parsed: list[ShapeExpr | None] = []
        for text in self.constraints:
            try:
                parsed.append(ShapeExpr(text, comparisons=True))
            except ManifestError:
                parsed.append(None)  # only used to explain CATENC_E_SHAPE
        return parsed

    def _free_deps(self, expr: ShapeExpr, chain: tuple[str, ...] = ()) -> frozenset[str]:
        """The free symbols expr depends on, looking through derived symbols."""
        deps: set[str] = set()
        for name in expr.names:
            if name in self._derived_exprs:
                if name in chain:
                    raise ManifestError(f"entry {self.name!r}: derived {name} depends on itself")
                deps |= self._free_deps(self._derived_exprs[name], (*chain, name))
            elif name in self.dims:
                deps.add(name)
        return frozenset(deps)

    # ------------------------------------------------------------------- symbols

    @property
    def signature(self) -> str:
        """The entry as ``name(inputs) -> outputs``, with dtypes and shapes."""
        inputs = ", ".join(map(str, self.inputs))
        outputs = ", ".join(map(str, self.outputs))
        if len(self.outputs) != 1:
            outputs = f"({outputs})"
        return f"{self.name}({inputs}) -> {outputs}"

    def __repr__(self) -> str:
        return f"<catenc entry {self.signature}>"

    def bind(self, *inputs: Any, **dims: int) -> dict[str, int]:
        """The values of all symbols (free, derived, specialized) for these inputs.

        A shape entry that is a bare free symbol binds it to the input's size on that axis;
        a free symbol that only appears inside expressions of one unknown (``2*K + 1``) is
        solved for. Symbols given as keywords win over inference; then every shape entry of
        every input is evaluated and compared. Raises :class:`ShapeError` naming the
        argument, the axis, the expected and the actual size on a mismatch, and TypeError
        when a free symbol can be inferred from no input (give it as a keyword).
        """
        return self._bind([np.shape(value) for value in inputs], dims)

    @property
    def threaded(self) -> bool:
        """Whether its calls run on CPU threads (a GPU entry's do not)."""
        return self._threads_function is not None

    def set_num_threads(self, n: int) -> None:
        """Run this entry's calls on `n` threads from now on (n <= 0: the default again); a GPU
        entry has no threads to set (docs/abi.md, "Threads")."""
        if self._threads_function is None:
            raise TypeError(f"{self.name}() runs on a GPU: it has no thread count")
        self._threads_function(max(min(int(n), 1 << 20), 0))

    def workspace_bytes(self, **dims: int) -> int:
        """The workspace size in bytes for these symbol values (all free symbols needed).

        Calls the library's ``NAME_workspace_bytes``; falls back to the manifest's
        ``workspace_bytes`` expression when the entry names no size function. SIZE_MAX means
        a size computed from these dims overflows int64 (the entry returns CATENC_E_SHAPE).
        """
        env, given = self._start(dims)
        return self._workspace_size(self._finish(env, given))

    def _start(self, dims: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
        """Symbol values: the specialized ones and the free ones given as keywords."""
        env: dict[str, int] = dict(self.specialized)
        given: dict[str, int] = {}
        for name, value in dims.items():
            if name not in self.dims and name not in self._derived_exprs and name not in env:
                symbols = ", ".join(self.dims) or "none"
                raise TypeError(
                    f"{self.name}() got an unexpected keyword argument {name!r} (its free symbols: {symbols})"
                )
            given[name] = _as_dim(name, value)
            if name in self.dims:
                env[name] = given[name]
        return env, given

    def _finish(self, env: dict[str, int], given: Mapping[str, int]) -> dict[str, int]:
        """All symbol values, once env holds every free symbol; checks the given ones."""
        missing = [name for name in self.dims if name not in env]
        if missing:
            names = ", ".join(missing)
            example = ", ".join(f"{name}=..." for name in missing)
            raise TypeError(
                f"{self.name}(): cannot infer {names} from the input shapes; "
                f"pass {'it as a keyword' if len(missing) == 1 else 'them as keywords'}: {example}"
            )
        scope = Scope(env, self._derived_exprs)
        try:
            for name in self._derived_exprs:
                scope[name]
        except ZeroDivisionError:
            raise ShapeError(f"{self.name}: division by zero deriving {name}") from None
        values = {name: scope[name] for name in self.dims}
        values |= {name: scope[name] for name in self._derived_exprs}
        values |= self.specialized
        for name, value in given.items():
            if values[name] != value:
                how = self.derived.get(name)
                how = f"{name} = {how} = {values[name]}" if how else f"{name} = {values[name]}"
                raise ShapeError(f"{self.name}: {name}={value} was given but {how}")
        return values

    def _bind(self, shapes: Sequence[tuple[int, ...]], dims: Mapping[str, Any]) -> dict[str, int]:
        if len(shapes) != len(self.inputs):
            names = ", ".join(spec.name for spec in self.inputs)
            raise TypeError(f"{self.name}() takes {len(self.inputs)} inputs ({names}), got {len(shapes)}")
        for spec, shape in zip(self.inputs, shapes, strict=True):
            if len(shape) != spec.rank:
                raise ShapeError(
                    f"{self.name}: input {spec.name!r} must have rank {spec.rank} ({spec}), got shape {tuple(shape)}"
                )
        env, given = self._start(dims)
        for spec, shape in zip(self.inputs, shapes, strict=True):
            for expr, size in zip(spec.exprs, shape, strict=True):
                if expr.symbol in self.dims and expr.symbol not in env:
                    env[expr.symbol] = int(size)
        self._solve(env, shapes)
        values = self._finish(env, given)
        for spec, shape in zip(self.inputs, shapes, strict=True):
            for axis, (expr, size) in enumerate(zip(spec.exprs, shape, strict=True)):
                expected = self._evaluate(expr, values, spec)
                if expected != size:
                    raise ShapeError(
                        f"{self.name}: input {spec.name!r} axis {axis}: expected {expected} "
                        f"({expr} with {self._describe(expr, values)}), got {size} "
                        f"(shape {tuple(shape)})"
                    )
        for spec in self.outputs:
            for axis, expr in enumerate(spec.exprs):
                if self._evaluate(expr, values, spec) < 0:
                    raise ShapeError(
                        f"{self.name}: output {spec.name!r} axis {axis}: {expr} is negative "
                        f"with {self._describe(expr, values)}"
                    )
        return values

    def _solve(self, env: dict[str, int], shapes: Sequence[tuple[int, ...]]) -> None:
        """Bind free symbols that occur alone in an affine input shape entry (``2*K+1``)."""
        mismatch: dict[str, str] = {}
        progress = True
        while progress:
            progress = False
            for spec, shape in zip(self.inputs, shapes, strict=True):
                for axis, (expr, size) in enumerate(zip(spec.exprs, shape, strict=True)):
                    unknown = [name for name in self._deps[expr.source] if name not in env]
                    if len(unknown) != 1:
                        continue
                    value = self._solve_affine(expr, unknown[0], env, int(size))
                    if value is not None and value >= 0:
                        env[unknown[0]] = value
                        progress = True
                    elif value is not None:
                        mismatch.setdefault(
                            unknown[0],
                            f"{self.name}: input {spec.name!r} axis {axis}: no value of "
                            f"{unknown[0]} makes {expr} equal {size} (shape {tuple(shape)})",
                        )
        for name, message in mismatch.items():
            if name not in env:
                raise ShapeError(message)

    def _solve_affine(self, expr: ShapeExpr, name: str, env: Mapping[str, int], size: int) -> int | None:
        """The value of name that makes expr equal size, when expr is affine in name.

        None when expr is not affine in name (the symbol must then be given), -1 when it
        is but no value >= 0 fits.
        """

        def at(value: int) -> int:
            return expr(Scope({**env, name: value}, self._derived_exprs))

        try:
            f0 = at(0)
            slope = at(1) - f0
            if slope == 0 or at(2) - f0 != 2 * slope:
                return None
            value, remainder = divmod(size - f0, slope)
            if remainder == 0 and value >= 0 and at(value) == size:
                return value
        except (ZeroDivisionError, KeyError):
            return None
        return -1

    def _evaluate(self, expr: ShapeExpr, values: Mapping[str, int], spec: ArgSpec) -> int:
        try:
            return expr(values)
        except ZeroDivisionError:
            raise ShapeError(f"{self.name}: division by zero in the shape of {spec.name!r}: {expr}") from None

    @staticmethod
    def _describe(expr: ShapeExpr, values: Mapping[str, int]) -> str:
        names = sorted(expr.names)
        return ", ".join(f"{name}={values[name]}" for name in names) or "no symbols"

    def _workspace_size(self, values: Mapping[str, int]) -> int:
        if self._size_function is not None:
            return int(self._size_function(*(values[name] for name in self.dims)))
        if self._workspace_expr is not None:
            return self._workspace_expr(values)
        return 0

    # --------------------------------------------------------------------- calls

    def __call__(
        self, *inputs: Any, out: Sequence[np.ndarray] | np.ndarray | None = None, **dims: int
    ) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run the entry and return its output(s).

        inputs, in declared order: array-likes, converted to the storage dtype and made
        C-contiguous (a float array for f16 is converted, for bf16 it is rounded to bf16
        bits, a uint16 array for f16 or bf16 is taken as bits, so is an ml_dtypes bfloat16
        array for bf16); a scalar input takes a
        Python number or a 0-d array. dims: symbol values, needed only for free symbols
        no input shape gives (see :meth:`bind`). out: preallocated outputs (a sequence, or
        one array), C-contiguous, of the exact storage dtype and shape.

        Returns the output array, or a tuple of them when there are several, in storage
        representation (bf16 as ml_dtypes bfloat16 where installed, see the module doc);
        scalar outputs are 0-d arrays. Raises :class:`ShapeError` on a
        shape mismatch, TypeError for an input whose dtype cannot be converted without
        changing the kind of its values (module doc), and :class:`CatencStatusError` when the
        C function returns nonzero (or, before the call, when a size overflows int64).
        """
        arrays = [np.asarray(value) for value in inputs]
        values = self._bind([array.shape for array in arrays], dims)
        for spec, array in zip(self.inputs, arrays, strict=True):
            _check_kind(self.name, spec, array)
        nbytes = self._workspace_size(values)
        if nbytes == SIZE_MAX:
            raise CatencStatusError(1, self.name, "a size computed from the dims overflows int64")
        args: list[Any] = []
        buffers: list[np.ndarray] = []
        for spec, array in zip(self.inputs, arrays, strict=True):
            if spec.rank == 0:
                args.append(self._scalar(spec, array))
            else:
                buffers.append(_to_buffer(array, spec.dtype))
                args.append(buffers[-1].ctypes.data)
        if self.weights is not None:
            args.append(self.weights_address())
        outputs = self._outputs(values, out, buffers)
        args += [output.ctypes.data for output in outputs]
        args += [values[name] for name in self.dims]
        workspace = aligned_buffer(nbytes) if nbytes else None
        status = self._invoke(args, workspace, nbytes)
        if status != 0:
            raise CatencStatusError(status, self.name, self._explain(status, values))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def weights_address(self) -> int:
        """The address of the weights data the entry reads its constants from (docs/abi.md)."""
        if self._weights_data is None:
            raise ManifestError(f"{self.name}: the manifest names no weights file to read the constants from")
        return self._weights_data()

    def call_raw(self, *args: Any) -> int:
        """Call the C function with every argument given, in C order; return its status.

        Buffers (inputs, outputs, workspace) are numpy arrays, addresses or None and are not
        checked: they must hold the storage dtype, be C-contiguous and have the sizes the
        dims say. Scalar inputs are numbers, dims and workspace_bytes ints. Use
        :func:`aligned_buffer` for the workspace.
        """
        if len(args) != len(self._roles):
            raise TypeError(f"{self.symbol}() takes {len(self._roles)} arguments, got {len(args)}")
        converted: list[Any] = []
        for (role, spec), value in zip(self._roles, args, strict=True):
            if role == "input" and spec is not None and spec.rank == 0:
                converted.append(self._scalar(spec, np.asarray(value)))
            elif role in ("input", "weights", "packed_weights", "output", "workspace") or role in self._trailing:
                converted.append(_pointer(value))
            else:
                converted.append(operator.index(value))
        return int(self._function(*converted))

    def _invoke(self, args: list[Any], workspace: np.ndarray | None, nbytes: int) -> int:
        """Call with the tensor, scalar and dim args, adding the workspace ones."""
        full = list(args)
        for role, _ in self._roles:
            if role == "workspace":
                full.append(None if workspace is None else workspace.ctypes.data)
            elif role == "workspace_bytes":
                full.append(nbytes)
            elif role in self._trailing:
                full.append(None)
        return int(self._function(*full))

    def _scalar(self, spec: ArgSpec, value: np.ndarray) -> int | float | bool:
        """A rank-0 input as the C value passed by value (bits for f16 and bf16)."""
        if value.ndim != 0:
            raise ShapeError(f"{self.name}: input {spec.name!r} is a scalar, got shape {value.shape}")
        _check_kind(self.name, spec, value)
        buffer = _to_buffer(value, spec.dtype)
        if spec.dtype.is_half:
            return int(buffer.view(np.uint16))
        return buffer.item()

    def _outputs(
        self,
        values: Mapping[str, int],
        out: Sequence[np.ndarray] | np.ndarray | None,
        inputs: Iterable[np.ndarray],
    ) -> list[np.ndarray]:
        shapes = [tuple(expr(values) for expr in spec.exprs) for spec in self.outputs]
        if out is None:
            return [np.empty(s, dtype=_result_dtype(spec.dtype)) for spec, s in zip(self.outputs, shapes, strict=True)]
        outputs = [out] if isinstance(out, np.ndarray) else list(out)
        if len(outputs) != len(self.outputs):
            raise TypeError(f"{self.name}: out must hold {len(self.outputs)} arrays")
        for spec, shape, array in zip(self.outputs, shapes, outputs, strict=True):
            if not isinstance(array, np.ndarray):
                raise TypeError(f"{self.name}: out {spec.name!r} must be a numpy array")
            if array.shape != shape:
                raise ShapeError(f"{self.name}: output {spec.name!r}: expected shape {shape}, got {array.shape}")
            if array.dtype != spec.dtype.numpy and not (spec.dtype.name == "bf16" and is_bfloat16(array)):
                raise TypeError(
                    f"{self.name}: output {spec.name!r} ({spec.dtype.name}) must have numpy "
                    f"dtype {spec.dtype.numpy}, got {array.dtype}"
                )
            if not array.flags.c_contiguous or not array.flags.writeable:
                raise ValueError(f"{self.name}: output {spec.name!r} must be C-contiguous and writeable")
        others = list(inputs)
        for index, array in enumerate(outputs):
            for other in others + outputs[index + 1 :]:
                if np.may_share_memory(array, other):
                    raise ValueError(f"{self.name}: output {self.outputs[index].name!r} overlaps another argument")
        return outputs

    def _explain(self, status: int, values: Mapping[str, int]) -> str:
        """Detail for a status error: the failing constraints for CATENC_E_SHAPE."""
        if status != 1 or not self.constraints:
            return ""
        failing = []
        for text, expr in zip(self.constraints, self._constraint_exprs, strict=True):
            try:
                if expr is None or not expr(values):
                    failing.append(text)
            except (KeyError, ZeroDivisionError):
                failing.append(text)
        symbols = ", ".join(f"{name}={value}" for name, value in values.items())
        return f"constraints {'; '.join(failing or self.constraints)} with {symbols}"


# ------------------------------------------------------------------------- library


class Library:
    """A loaded catenc library: its manifest and its entries.

    Attributes: ``path`` (the shared library), ``manifest_path``, ``manifest`` (the parsed
    JSON), ``runtime`` (the manifest's runtime object) and ``entries`` (name ->
    :class:`Entry`). ``lib["gemm"]`` and ``lib.gemm`` both give an entry. The shared
    library stays loaded as long as the Library or one of its entries lives.
    """

    def __init__(
        self,
        manifest_path: str | os.PathLike[str],
        *,
        verify: bool = True,
        weights: str | os.PathLike[str] | None = None,
    ) -> None:
        path = Path(manifest_path)
        if path.is_dir():
            found = sorted(path.glob("*.manifest.json"))
            if len(found) > 1 and (path / MANIFEST_NAME) not in found:
                names = ", ".join(p.name for p in found)
                raise ManifestError(f"{path}: holds several manifests ({names}); name the one to load")
            path = found[0] if len(found) == 1 else path / MANIFEST_NAME
        self.manifest_path = path.resolve()
        try:
            self.manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ManifestError(f"{path}: not valid JSON: {error}") from None
        where = str(path)
        if not isinstance(self.manifest, dict):
            raise ManifestError(f"{where}: the manifest must be a JSON object")
        schema = self.manifest.get("schema", MANIFEST_SCHEMA)
        if schema != MANIFEST_SCHEMA:
            raise ManifestError(f"{where}: schema {schema!r} is not {MANIFEST_SCHEMA!r}")
        self.runtime: dict[str, Any] = dict(self.manifest.get("runtime") or {})
        language = str(self.runtime.get("language", "c")).lower()
        if language not in HOST_LANGUAGES:
            from catenc.runtime.device_host import device_symbols  # GPU builds: pyopencl or libcudart

            self.path = self.manifest_path
            self._cdll = device_symbols(self.manifest, self.manifest_path.parent, language, where)
        else:
            self.path = self._shared_library(where, verify)
            self._cdll = ctypes.CDLL(str(self.path))
        convention = CALLING_CONVENTIONS.get(self.runtime.get("calling_convention", "host"))
        if convention is None:
            raise ManifestError(f"{where}: unknown calling_convention {self.runtime['calling_convention']!r}")
        trailing = tuple(name for name, _ in convention.trailing)
        self.entries: dict[str, Entry] = {}
        for spec in _required(self.manifest, "entries", where):
            entry = Entry(spec, self._cdll, trailing=trailing)
            if entry.name in self.entries:
                raise ManifestError(f"{where}: entry {entry.name!r} is declared twice")
            self.entries[entry.name] = entry
        takers = [entry for entry in self.entries.values() if entry.weights is not None]
        if takers:
            path = Path(weights) if weights is not None else self.manifest_path.parent / takers[0].weights["file"]
            data = WeightsData(path, [entry.weights for entry in takers])
            for entry in takers:
                packs = entry.weights["role"] == "packed_weights"
                entry._weights_data = PackedWeights(data, self._cdll, entry.weights).address if packs else data.address

    def _shared_library(self, where: str, verify: bool) -> Path:
        """The manifest's shared library, checked against its sha256 when verify."""
        libraries = [f for f in _required(self.manifest, "files", where) if f.get("role") == "shared_library"]
        if len(libraries) != 1:
            raise ManifestError(f"{where}: expected one file with role 'shared_library', found {len(libraries)}")
        path = (self.manifest_path.parent / libraries[0]["path"]).resolve()
        if not path.is_file():
            raise ManifestError(f"{where}: shared library {path} does not exist")
        digest = libraries[0].get("sha256")
        if verify and digest:
            actual = hashlib.sha256(path.read_bytes()).hexdigest()
            if actual != digest:
                raise ManifestError(
                    f"{where}: {path.name} has sha256 {actual}, the manifest says "
                    f"{digest}; rebuild, or load with verify=False"
                )
        return path

    def set_num_threads(self, n: int) -> None:
        """Run the calls of every CPU entry of the library on `n` threads (n <= 0: the default again)."""
        for entry in self.entries.values():
            if entry.threaded:
                entry.set_num_threads(n)

    def __getitem__(self, name: str) -> Entry:
        try:
            return self.entries[name]
        except KeyError:
            names = ", ".join(self.entries) or "none"
            raise KeyError(f"no entry {name!r} in {self.path.name} (entries: {names})") from None

    def __getattr__(self, name: str) -> Entry:
        entries = self.__dict__.get("entries")
        if entries is not None and name in entries:
            return entries[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute or entry {name!r}")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.__dict__.get("entries", ())))

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"<catenc library {self.path.name}: {', '.join(self.entries)}>"


def load(
    manifest_path: str | os.PathLike[str], *, verify: bool = True, weights: str | os.PathLike[str] | None = None
) -> Library:
    """Load the library a catenc build manifest describes.

    manifest_path is a ``*.manifest.json`` file or the directory that holds it (its only
    manifest, or ``model.manifest.json`` among several). With verify
    (the default) the shared library's sha256 must match the manifest's. Raises
    :class:`UnsupportedRuntimeError` for a build that cannot run here (``cuda`` without a
    GPU) and :class:`ManifestError` for a malformed manifest.

    A build with ``--weights external`` reads its constants from its weights file: the one beside
    the manifest, or ``weights``, a file of the same layout (docs/abi.md, "External weights"). It
    is mapped once, at the first call, and checked against the layout the library was compiled
    for (:class:`ManifestError` when it differs).
    """
    return Library(manifest_path, verify=verify, weights=weights)
