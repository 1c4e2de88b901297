"""Recurrent layers: RNN, GRU and LSTM over a sequence whose length is known when compiling.

The input projections of all time steps are one matrix product per direction; the recurrence is
unrolled at import, a few statements per time step (the gates, their activations, the new state).
Directions forward, reverse and bidirectional; layout 0 (time first) and 1 (batch first); the
activations attributes with their alphas and betas; clip; GRU's linear_before_reset; LSTM's
peepholes and input_forget. `sequence_lens` must be known: where a sequence is shorter, a
step past its end keeps the state and outputs zeros, and a reverse pass reads each sequence from its
own end (the projections gathered in that order, the outputs gathered back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from catenc.onnx import builder as B
from catenc.onnx.builder import (
    ALL,
    ELLIPSIS,
    NEW_AXIS,
    Group,
    Node,
    Size,
    TypeName,
    call,
    matmul,
    num,
    read,
    seq,
    shape_list,
    span,
    where,
)
from catenc.onnx.emitter import Emitter
from catenc.onnx.errors import ModelError, Unsupported
from catenc.onnx.registry import OnnxNode, converter, known_ints, need_float
from catenc.onnx.shape import shape_text
from catenc.onnx.values import Shape, Value, known_value
from catenc.symbolic import Expr, const

Activation = Callable[[Node, Node, Node], Node]  # (x, alpha, beta) -> the activation of x
# activation -> (the defaults of the params it reads from activation_alpha, then _beta; the function)
_ACTIVATIONS: dict[str, tuple[tuple[float, ...], Activation]] = {
    "Tanh": ((), lambda x, a, b: call("tanh", x)),
    "Sigmoid": ((), lambda x, a, b: call("sigmoid", x)),
    "Relu": ((), lambda x, a, b: call("relu", x)),
    "Softsign": ((), lambda x, a, b: x / Group(1.0 + call("abs", x))),
    "Softplus": ((), lambda x, a, b: call("softplus", x)),
    "Affine": ((1.0, 0.0), lambda x, a, b: x * a + b),
    "LeakyRelu": ((0.01,), lambda x, a, b: where(x >= 0, x, x * a)),
    "ThresholdedRelu": ((1.0,), lambda x, a, b: where(x > a, x, 0)),
    "ScaledTanh": ((1.0, 1.0), lambda x, a, b: call("tanh", x * b) * a),
    "HardSigmoid": ((0.2, 0.5), lambda x, a, b: call("clip", x * a + b, 0, 1)),
    "Elu": ((1.0,), lambda x, a, b: where(x >= 0, x, Group(call("exp", x) - 1.0) * a)),
}
_DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _activations(node: OnnxNode, dtype: str, directions: int) -> list[list[Callable[[Node], Node]]]:
    """Per direction, the activation functions (f, g, h) of an expression."""
    count = len(_DEFAULTS[node.op])
    names = list(node.attr("activations") or _DEFAULTS[node.op] * directions)
    if len(names) == count:
        names *= directions
    if len(names) != count * directions:
        raise ModelError(f"{len(names)} activations for {directions} direction(s) of {node.op}")
    alphas, betas = list(node.attr("activation_alpha") or []), list(node.attr("activation_beta") or [])
    functions = []
    for name in names:
        key = next((k for k in _ACTIVATIONS if k.lower() == name.lower()), None)
        if key is None:
            raise Unsupported(f"activation '{name}'")
        defaults, function = _ACTIVATIONS[key]
        params = []
        for k, default in enumerate(defaults):
            given = alphas if k == 0 else betas
            params.append(given.pop(0) if given else default)
        a, b = (B.lit(p, dtype) for p in (*params, 0.0, 0.0)[:2])
        functions.append(lambda x, f=function, a=a, b=b: f(x, a, b))
    return [functions[d * count : (d + 1) * count] for d in range(directions)]


@dataclass(frozen=True)
class _Layer:
    """What every step of one node needs."""

    node: OnnxNode
    dtype: str
    steps: int
    batch: Expr
    hidden: Expr
    clip: float | None
    lengths: tuple[int, ...] | None  # of each sequence of the batch, where one is shorter than `steps`

    @property
    def state(self) -> Shape:
        return (self.batch, self.hidden)

    def temp(self, emit: Emitter, expr: Node, what: str, shape: Shape | None = None) -> Node:
        """An intermediate of the layer's dtype, of the state's shape unless given."""
        return emit.ref(emit.temp(expr, self.dtype, self.state if shape is None else shape, what))

    def gates(self, emit: Emitter, expr: Node, what: str) -> Node:
        """A gate's pre-activation as a tensor, clipped where the node says."""
        if self.clip is not None:
            c = B.lit(self.clip, self.dtype)
            expr = call("clip", expr, -c, c)
        return self.temp(emit, expr, what)

    def cols(self, of: Node, gate: int, count: int = 1) -> Node:
        """Columns gate..gate+count of a (..., G*H) tensor."""
        h = self.hidden
        first = None if gate == 0 else Size(h * gate)
        return read(of, [ELLIPSIS, span(first, Size(h * (gate + count)))], of.shape[:-1] + (h * count,))


def _row(of: Node, d: int) -> Node:
    """`of[d]`: direction d of a per-direction input."""
    return read(of, [d], of.shape[1:])


def _inputs(node: OnnxNode, emit: Emitter) -> tuple[_Layer, int, dict[str, Node | None]]:
    x, w, r = node.need(0), node.need(1), node.need(2)
    need_float(node, x)
    if x.rank != 3 or w.rank != 3 or r.rank != 3:
        raise ModelError("X, W and R must be 3-D")
    layout = node.attr("layout", 0)
    steps, batch = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    if not steps.is_const:
        raise Unsupported("a sequence length computed at run time (the recurrence is unrolled when compiling)")
    direction = node.attr("direction", "forward")
    directions = 2 if direction == "bidirectional" else 1
    if direction not in ("forward", "reverse", "bidirectional") or w.shape[0] != const(directions):
        raise ModelError(f"direction '{direction}' with W for {w.shape[0]} direction(s)")
    hidden = r.shape[-1]
    size = node.attr("hidden_size")
    if size is not None and const(size) != hidden:
        raise ModelError(f"hidden_size={size}, but R is for a hidden size of {hidden}")
    if w.shape[1] != hidden * _GATES[node.op] or r.shape[1] != hidden * _GATES[node.op]:
        raise ModelError(f"W and R must have {_GATES[node.op]} * hidden_size rows")
    if w.shape[2] != x.shape[2] or r.shape[0] != w.shape[0]:
        raise ModelError("W must be (directions, gates * hidden_size, input size) and R of as many directions")
    expected = {
        3: (const(directions), hidden * (2 * _GATES[node.op])),
        5: (const(directions), batch, hidden) if layout == 0 else (batch, const(directions), hidden),
        7: (const(directions), hidden * 3),
    }
    expected[6] = expected[5]
    for k, shape in expected.items():
        value = node.input(k)
        if value is not None and (k != 6 or node.op == "LSTM") and (value.shape != shape or value.dtype != x.dtype):
            raise ModelError(f"input {k} has shape {shape_text(value.shape)}, not {shape_text(shape)} of {x.dtype}")
    lengths = None
    if node.input(4) is not None:
        values = known_ints(node.input(4), "the sequence lengths (input 4)")
        if any(isinstance(v, Expr) or not 0 <= v <= steps.value for v in values) or const(len(values)) != batch:
            raise ModelError(f"sequence lengths {values} for a batch of {batch} sequences of {steps}")
        lengths = tuple(values) if any(v != steps.value for v in values) else None
    clip = node.attr("clip")
    layer = _Layer(node, x.dtype, steps.value, batch, hidden, None if clip is None else float(clip), lengths)
    refs: dict[str, Node | None] = {"x": emit.ref(x), "w": emit.ref(w), "r": emit.ref(r)}
    extra = {3: "b", 5: "h0", 6: "c0", 7: "p"} if node.op == "LSTM" else {3: "b", 5: "h0"}
    for k, name in extra.items():
        value = node.input(k)
        refs[name] = emit.ref(value) if value is not None else None
    if layout == 1:
        refs["x"] = layer.temp(emit, _transposed(refs["x"], [1, 0, 2]), "x", (steps, batch, x.shape[2]))
        for name in ("h0", "c0"):
            given = refs.get(name)
            if given is not None:
                refs[name] = layer.temp(emit, _transposed(given, [1, 0, 2]), name, (const(directions), batch, hidden))
    return layer, directions, refs


def _transposed(x: Node, perm: list[int] | None = None) -> Node:
    """`transpose(x, perm)`, or the matrix x transposed (`transpose(x)`)."""
    if perm is None:
        return call("transpose", x, dtype=x.dtype, shape=x.shape[::-1])
    return call("transpose", x, seq(perm), dtype=x.dtype, shape=tuple(x.shape[p] for p in perm))


def _start(layer: _Layer, emit: Emitter, refs: dict[str, Node | None], name: str, d: int) -> Node:
    """The initial state (h or c) of direction d."""
    given, hint = refs.get(name), f"{name[0]}_init{d}"
    if given is not None:
        return layer.temp(emit, _row(given, d), hint)
    zeros = call("zeros", shape_list(layer.state), TypeName(layer.dtype), dtype=layer.dtype, shape=layer.state)
    return layer.temp(emit, zeros, hint)


def _projection(layer: _Layer, emit: Emitter, refs: dict[str, Node | None], d: int, bias_gates: int) -> Node:
    """X @ W[d]^T for all steps (T, B, G*H), plus both biases of the first `bias_gates` gates and
    the input bias of the rest."""
    gh = layer.hidden * _GATES[layer.node.op]
    shape = (const(layer.steps), layer.batch, gh)
    expr = matmul(refs["x"], _transposed(_row(refs["w"], d)), shape)
    if refs["b"] is not None:
        b = _row(refs["b"], d)
        rb = read(b, [span(Size(gh))], (gh,))
        if bias_gates < _GATES[layer.node.op]:
            recurrent = layer.hidden * bias_gates
            used = read(b, [span(Size(gh), Size(gh + recurrent))], (recurrent,))
            rb = call("pad", used, seq([seq([0, Size(gh - recurrent)])]), dtype=layer.dtype, shape=(gh,))
        expr = expr + read(b, [span(None, Size(gh))], (gh,)) + rb
    return layer.temp(emit, expr, f"xw{d}", shape)


def _outputs(
    node: OnnxNode, layer: _Layer, emit: Emitter, passes: list[_Pass], finals: list[list[Node]]
) -> list[Value]:
    """Y (T, D, B, H) and the final states (D, B, H), or batch first for layout 1."""
    layout = node.attr("layout", 0)
    directions = len(passes)
    t, b, h, dd = const(layer.steps), layer.batch, layer.hidden, const(directions)
    results: list[Value] = []
    for k, name in enumerate(node.outputs):
        if not name:
            results.append(Value(layer.dtype, (), "unused"))  # an omitted output: never read
            continue
        if k == 0:
            per = [p.y(emit) for p in passes]
            if directions == 1:
                joined = call("unsqueeze", per[0], num(1), dtype=layer.dtype, shape=(t, dd, b, h))
            else:
                joined = _stacked(per, 1, (t, dd, b, h))
            expr = joined if layout == 0 else _transposed(joined, [2, 0, 1, 3])
        else:
            joined = _stacked([f[k - 1] for f in finals], 0, (dd, b, h))
            expr = joined if layout == 0 else _transposed(joined, [1, 0, 2])
        results.append(emit.out(expr, layer.dtype, expr.shape, k))
    return results


def _stacked(parts: list[Node], axis: int, shape: Shape) -> Node:
    """`stack([parts], axis=axis)`."""
    return call("stack", seq(parts), dtype=parts[0].dtype, shape=shape, axis=num(axis))


class _Pass:
    """One direction's pass over the time steps: the projection each step reads, the state it keeps
    where a sequence has ended, and its outputs in time order."""

    def __init__(self, layer: _Layer, emit: Emitter, xw: Node, d: int) -> None:
        self.layer, self.d = layer, d
        reverse = layer.node.attr("direction", "forward") == "reverse" or d == 1
        self.times = list(reversed(range(layer.steps))) if reverse else list(range(layer.steps))
        self.xw: Node = xw
        self.back: list[Node] | None = None
        self.ys: list[Node | None] = [None] * layer.steps
        if reverse and layer.lengths is not None:  # step k reads time length - 1 - k of each sequence
            order = [[n - 1 - k if k < n else k for n in layer.lengths] for k in range(layer.steps)]
            positions = emit.ref(known_value(np.array(order, dtype=np.int64), "i64"))
            count = len(layer.lengths)
            sequences = call("arange", count, dtype="i64", shape=(const(count),))
            self.back = [positions, read(sequences, [NEW_AXIS, ALL], (const(1), const(count)))]
            shape = (const(layer.steps), layer.batch, layer.hidden * _GATES[layer.node.op])
            self.xw = layer.temp(emit, read(xw, self.back, shape), f"xw{d}_from_ends", shape)
            self.times = list(range(layer.steps))

    def _mask(self, emit: Emitter, t: int) -> Node | None:
        """Which sequences of the batch are still running at step t ([B, 1] of bool), or None: all."""
        lengths = self.layer.lengths
        if lengths is None or all(t < n for n in lengths):
            return None
        return emit.ref(known_value(np.array([[t < n] for n in lengths]), "bool"))

    def kept(self, emit: Emitter, new: Node, old: Node, t: int, what: str) -> Node:
        """The state after step t: `new`, or `old` for the sequences that ended before it."""
        mask = self._mask(emit, t)
        return new if mask is None else self.layer.temp(emit, where(mask, new, old), f"{what}_kept")

    def output(self, emit: Emitter, h: Node, t: int) -> None:
        """Step t's output: h, or zeros for the sequences that ended before it."""
        mask = self._mask(emit, t)
        self.ys[t] = h if mask is None else self.layer.temp(emit, where(mask, h, 0), f"y{self.d}_{t}")

    def y(self, emit: Emitter) -> Node:
        """The outputs of all steps, (T, B, H) in time order."""
        shape = (const(self.layer.steps), self.layer.batch, self.layer.hidden)
        stacked = _stacked([y for y in self.ys if y is not None], 0, shape)
        if self.back is None:
            return stacked
        return read(self.layer.temp(emit, stacked, f"y{self.d}_by_step", shape), self.back, shape)


@converter("RNN")
def rnn(node: OnnxNode, emit: Emitter) -> list[Value]:
    layer, directions, refs = _inputs(node, emit)
    acts = _activations(node, layer.dtype, directions)
    passes, finals = [], []
    for d in range(directions):
        xw = _projection(layer, emit, refs, d, 1)
        rt = layer.temp(emit, _transposed(_row(refs["r"], d)), f"rt{d}", (layer.hidden, layer.hidden))
        h = _start(layer, emit, refs, "h0", d)
        run = _Pass(layer, emit, xw, d)
        for t in run.times:
            pre = layer.gates(emit, _step(run, t, layer.hidden) + matmul(h, rt, layer.state), f"a{d}_{t}")
            new = layer.temp(emit, acts[d][0](pre), f"h{d}_{t}")
            run.output(emit, new, t)
            h = run.kept(emit, new, h, t, f"h{d}_{t}")
        passes.append(run)
        finals.append([h])
    return _outputs(node, layer, emit, passes, finals)


def _step(run: _Pass, t: int, width: Expr) -> Node:
    """The projection of step t, (B, width)."""
    return read(run.xw, [t], (run.layer.batch, width))


@converter("GRU")
def gru(node: OnnxNode, emit: Emitter) -> list[Value]:
    layer, directions, refs = _inputs(node, emit)
    acts = _activations(node, layer.dtype, directions)
    linear = bool(node.attr("linear_before_reset", 0))
    passes, finals = [], []
    hh = (layer.hidden, layer.hidden)
    for d in range(directions):
        f, g = acts[d]
        xw = _projection(layer, emit, refs, d, 2)
        rt = layer.temp(emit, _transposed(_row(refs["r"], d)), f"rt{d}", (layer.hidden, layer.hidden * 3))
        rzr, rh = layer.cols(rt, 0, 2), layer.temp(emit, layer.cols(rt, 2), f"rh{d}", hh)
        rbh = layer.cols(_row(refs["b"], d), 5) if refs["b"] is not None else None
        h = _start(layer, emit, refs, "h0", d)
        run = _Pass(layer, emit, xw, d)
        for t in run.times:
            xt = _step(run, t, layer.hidden * 3)
            pair = (layer.batch, layer.hidden * 2)
            zr = layer.temp(emit, layer.cols(xt, 0, 2) + matmul(h, rzr, pair), f"zr{d}_{t}", pair)
            z = layer.temp(emit, f(layer.gates(emit, layer.cols(zr, 0), f"z{d}_{t}")), "z")
            r = layer.temp(emit, f(layer.gates(emit, layer.cols(zr, 1), f"r{d}_{t}")), "r")
            xh = layer.cols(xt, 2)
            if linear:
                recurrent = matmul(h, rh, layer.state)
                pre = xh + r * Group(recurrent + rbh if rbh is not None else recurrent)
            else:
                pre = xh + matmul(Group(r * h), rh, layer.state)
                pre = pre + rbh if rbh is not None else pre
            cand = layer.temp(emit, g(layer.gates(emit, pre, f"n{d}_{t}")), f"cand{d}_{t}")
            new = layer.temp(emit, Group(1.0 - z) * cand + z * h, f"h{d}_{t}")
            run.output(emit, new, t)
            h = run.kept(emit, new, h, t, f"h{d}_{t}")
        passes.append(run)
        finals.append([h])
    return _outputs(node, layer, emit, passes, finals)


@converter("LSTM")
def lstm(node: OnnxNode, emit: Emitter) -> list[Value]:
    layer, directions, refs = _inputs(node, emit)
    acts = _activations(node, layer.dtype, directions)
    couple = bool(node.attr("input_forget", 0))
    passes, finals = [], []
    four = (layer.batch, layer.hidden * 4)
    for d in range(directions):
        f, g, hf = acts[d]
        xw = _projection(layer, emit, refs, d, 4)
        rt = layer.temp(emit, _transposed(_row(refs["r"], d)), f"rt{d}", (layer.hidden, layer.hidden * 4))
        peep = [layer.cols(_row(refs["p"], d), k) for k in range(3)] if refs.get("p") is not None else None
        h, c = _start(layer, emit, refs, "h0", d), _start(layer, emit, refs, "c0", d)
        run = _Pass(layer, emit, xw, d)
        for t in run.times:
            gates = layer.temp(emit, _step(run, t, layer.hidden * 4) + matmul(h, rt, four), f"gates{d}_{t}", four)
            pre_i, pre_o, pre_f, pre_c = (layer.cols(gates, k) for k in range(4))
            if peep:
                pre_i, pre_f = pre_i + peep[0] * c, pre_f + peep[2] * c
            i = layer.temp(emit, f(layer.gates(emit, pre_i, f"i{d}_{t}")), "in")
            forget = 1.0 - i if couple else f(layer.gates(emit, pre_f, f"f{d}_{t}"))
            fg = layer.temp(emit, forget, "forget")
            cand = g(layer.gates(emit, pre_c, f"g{d}_{t}"))
            new_c = layer.temp(emit, fg * c + i * cand, f"c{d}_{t}")
            if peep:
                pre_o = pre_o + peep[1] * new_c
            o = layer.temp(emit, f(layer.gates(emit, pre_o, f"o{d}_{t}")), "out")
            new = layer.temp(emit, o * hf(new_c), f"h{d}_{t}")
            run.output(emit, new, t)
            h, c = run.kept(emit, new, h, t, f"h{d}_{t}"), run.kept(emit, new_c, c, t, f"c{d}_{t}")
        passes.append(run)
        finals.append([h, c])
    return _outputs(node, layer, emit, passes, finals)
