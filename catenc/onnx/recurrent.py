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

from catenc.onnx.emitter import Emitter
from catenc.onnx.registry import ModelError, OnnxNode, Unsupported, converter, known_ints, need_float
from catenc.onnx.shape import shape_text
from catenc.onnx.values import Shape, Value, known_value
from catenc.onnx.values import literal as lit
from catenc.symbolic import Expr, const

# activation -> (the defaults of the params it reads from activation_alpha, then _beta; body template)
_ACTIVATIONS: dict[str, tuple[tuple[float, ...], str]] = {
    "Tanh": ((), "tanh({x})"),
    "Sigmoid": ((), "sigmoid({x})"),
    "Relu": ((), "relu({x})"),
    "Softsign": ((), "{x} / (1.0 + abs({x}))"),
    "Softplus": ((), "softplus({x})"),
    "Affine": ((1.0, 0.0), "{x} * {a} + {b}"),
    "LeakyRelu": ((0.01,), "where({x} >= 0, {x}, {x} * {a})"),
    "ThresholdedRelu": ((1.0,), "where({x} > {a}, {x}, 0)"),
    "ScaledTanh": ((1.0, 1.0), "tanh({x} * {b}) * {a}"),
    "HardSigmoid": ((0.2, 0.5), "clip({x} * {a} + {b}, 0, 1)"),
    "Elu": ((1.0,), "where({x} >= 0, {x}, (exp({x}) - 1.0) * {a})"),
}
_DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _activations(node: OnnxNode, dtype: str, directions: int) -> list[list[Callable[[str], str]]]:
    """Per direction, the activation functions (f, g, h) as body templates over a name."""
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
        defaults, template = _ACTIVATIONS[key]
        params = []
        for k, default in enumerate(defaults):
            given = alphas if k == 0 else betas
            params.append(given.pop(0) if given else default)
        a, b = (lit(p, dtype) for p in (*params, 0.0, 0.0)[:2])
        functions.append(lambda x, t=template, a=a, b=b: t.format(x=x, a=a, b=b))
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

    def gates(self, emit: Emitter, expr: str, what: str) -> str:
        """A gate's pre-activation as a name, clipped where the node says."""
        if self.clip is not None:
            c = lit(self.clip, self.dtype)
            expr = f"clip({expr}, -{c}, {c})"
        return emit.temp(expr, self.dtype, self.state, what).name

    def cols(self, text: str, gate: int, count: int = 1) -> str:
        """Columns gate..gate+count of a (..., G*H) tensor."""
        h = self.hidden
        first = "" if gate == 0 else lit(h * gate, "i64")
        return f"{text}[..., {first}:{lit(h * (gate + count), 'i64')}]"


def _inputs(node: OnnxNode, emit: Emitter) -> tuple[_Layer, int, dict[str, str | None]]:
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
    texts: dict[str, str | None] = {"x": emit.text(x), "w": emit.text(w), "r": emit.text(r)}
    extra = {3: "b", 5: "h0", 6: "c0", 7: "p"} if node.op == "LSTM" else {3: "b", 5: "h0"}
    for k, name in extra.items():
        value = node.input(k)
        texts[name] = emit.text(value) if value is not None else None
    if layout == 1:
        texts["x"] = emit.temp(f"transpose({texts['x']}, [1, 0, 2])", x.dtype, (steps, batch, x.shape[2]), "x").name
        for name in ("h0", "c0"):
            if texts.get(name):
                shape = (const(directions), batch, hidden)
                texts[name] = emit.temp(f"transpose({texts[name]}, [1, 0, 2])", x.dtype, shape, name).name
    return layer, directions, texts


def _start(layer: _Layer, emit: Emitter, texts: dict[str, str | None], name: str, d: int) -> str:
    """The initial state (h or c) of direction d."""
    given, hint = texts.get(name), f"{name[0]}_init{d}"
    if given:
        return emit.temp(f"{given}[{d}]", layer.dtype, layer.state, hint).name
    return emit.temp(f"zeros({shape_text(layer.state)}, {layer.dtype})", layer.dtype, layer.state, hint).name


def _projection(layer: _Layer, emit: Emitter, texts: dict[str, str | None], d: int, bias_gates: int) -> str:
    """X @ W[d]^T for all steps (T, B, G*H), plus both biases of the first `bias_gates` gates and
    the input bias of the rest."""
    gh = layer.hidden * _GATES[layer.node.op]
    expr = f"{texts['x']} @ transpose({texts['w']}[{d}])"
    if texts["b"]:
        b = f"{texts['b']}[{d}]"
        rb = f"{b}[{lit(gh, 'i64')}:]"
        if bias_gates < _GATES[layer.node.op]:
            recurrent = layer.hidden * bias_gates
            rb = f"pad({b}[{lit(gh, 'i64')}:{lit(gh + recurrent, 'i64')}], [[0, {lit(gh - recurrent, 'i64')}]])"
        expr += f" + {b}[:{lit(gh, 'i64')}] + {rb}"
    shape = (const(layer.steps), layer.batch, gh)
    return emit.temp(expr, layer.dtype, shape, f"xw{d}").name


def _outputs(node: OnnxNode, layer: _Layer, emit: Emitter, passes: list[_Pass], finals: list[list[str]]) -> list[Value]:
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
            per = [p.y_text(emit) for p in passes]
            joined = f"unsqueeze({per[0]}, 1)" if directions == 1 else f"stack([{', '.join(per)}], axis=1)"
            expr, shape = (
                (joined, (t, dd, b, h)) if layout == 0 else (f"transpose({joined}, [2, 0, 1, 3])", (b, t, dd, h))
            )
        else:
            joined = f"stack([{', '.join(f[k - 1] for f in finals)}], axis=0)"
            expr, shape = (joined, (dd, b, h)) if layout == 0 else (f"transpose({joined}, [1, 0, 2])", (b, dd, h))
        results.append(emit.out(expr, layer.dtype, shape, k))
    return results


class _Pass:
    """One direction's pass over the time steps: the projection each step reads, the state it keeps
    where a sequence has ended, and its outputs in time order."""

    def __init__(self, layer: _Layer, emit: Emitter, xw: str, d: int) -> None:
        self.layer, self.d = layer, d
        reverse = layer.node.attr("direction", "forward") == "reverse" or d == 1
        self.times = list(reversed(range(layer.steps))) if reverse else list(range(layer.steps))
        self.xw, self.back = xw, None
        self.ys = [""] * layer.steps
        if reverse and layer.lengths is not None:  # step k reads time length - 1 - k of each sequence
            order = [[n - 1 - k if k < n else k for n in layer.lengths] for k in range(layer.steps)]
            positions = emit.text(known_value(np.array(order, dtype=np.int64), "i64"))
            self.back = f"[{positions}, arange({len(layer.lengths)})[None, :]]"
            shape = (const(layer.steps), layer.batch, layer.hidden * _GATES[layer.node.op])
            self.xw = emit.temp(f"{xw}{self.back}", layer.dtype, shape, f"xw{d}_from_ends").name
            self.times = list(range(layer.steps))

    def kept(self, emit: Emitter, new: str, old: str, t: int, what: str) -> str:
        """The state after step t: `new`, or `old` for the sequences that ended before it."""
        lengths = self.layer.lengths
        if lengths is None or all(t < n for n in lengths):
            return new
        mask = emit.text(known_value(np.array([[t < n] for n in lengths]), "bool"))
        return emit.temp(f"where({mask}, {new}, {old})", self.layer.dtype, self.layer.state, f"{what}_kept").name

    def output(self, emit: Emitter, h: str, t: int) -> None:
        """Step t's output: h, or zeros for the sequences that ended before it."""
        lengths = self.layer.lengths
        if lengths is not None and not all(t < n for n in lengths):
            mask = emit.text(known_value(np.array([[t < n] for n in lengths]), "bool"))
            h = emit.temp(f"where({mask}, {h}, 0)", self.layer.dtype, self.layer.state, f"y{self.d}_{t}").name
        self.ys[t] = h

    def y_text(self, emit: Emitter) -> str:
        """The outputs of all steps, (T, B, H) in time order."""
        stacked = f"stack([{', '.join(self.ys)}], axis=0)"
        if self.back is None:
            return stacked
        shape = (const(self.layer.steps), self.layer.batch, self.layer.hidden)
        return f"{emit.temp(stacked, self.layer.dtype, shape, f'y{self.d}_by_step').name}{self.back}"


@converter("RNN")
def rnn(node: OnnxNode, emit: Emitter) -> list[Value]:
    layer, directions, texts = _inputs(node, emit)
    acts = _activations(node, layer.dtype, directions)
    passes, finals = [], []
    for d in range(directions):
        xw = _projection(layer, emit, texts, d, 1)
        rt = emit.temp(f"transpose({texts['r']}[{d}])", layer.dtype, (layer.hidden, layer.hidden), f"rt{d}").name
        h = _start(layer, emit, texts, "h0", d)
        run = _Pass(layer, emit, xw, d)
        for t in run.times:
            pre = layer.gates(emit, f"{run.xw}[{t}] + {h} @ {rt}", f"a{d}_{t}")
            new = emit.temp(acts[d][0](pre), layer.dtype, layer.state, f"h{d}_{t}").name
            run.output(emit, new, t)
            h = run.kept(emit, new, h, t, f"h{d}_{t}")
        passes.append(run)
        finals.append([h])
    return _outputs(node, layer, emit, passes, finals)


@converter("GRU")
def gru(node: OnnxNode, emit: Emitter) -> list[Value]:
    layer, directions, texts = _inputs(node, emit)
    acts = _activations(node, layer.dtype, directions)
    linear = bool(node.attr("linear_before_reset", 0))
    passes, finals = [], []
    hh = (layer.hidden, layer.hidden)
    for d in range(directions):
        f, g = acts[d]
        xw = _projection(layer, emit, texts, d, 2)
        rt = emit.temp(f"transpose({texts['r']}[{d}])", layer.dtype, (layer.hidden, layer.hidden * 3), f"rt{d}").name
        rzr, rh = layer.cols(rt, 0, 2), emit.temp(layer.cols(rt, 2), layer.dtype, hh, f"rh{d}").name
        rbh = f"{layer.cols(texts['b'] + f'[{d}]', 5)}" if texts["b"] else None
        h = _start(layer, emit, texts, "h0", d)
        run = _Pass(layer, emit, xw, d)
        for t in run.times:
            zr = emit.temp(
                f"{layer.cols(f'{run.xw}[{t}]', 0, 2)} + {h} @ {rzr}",
                layer.dtype,
                (layer.batch, layer.hidden * 2),
                f"zr{d}_{t}",
            ).name
            z = emit.temp(f(layer.gates(emit, layer.cols(zr, 0), f"z{d}_{t}")), layer.dtype, layer.state, "z").name
            r = emit.temp(f(layer.gates(emit, layer.cols(zr, 1), f"r{d}_{t}")), layer.dtype, layer.state, "r").name
            xh = layer.cols(f"{run.xw}[{t}]", 2)
            bias = f" + {rbh}" if rbh else ""
            pre = f"{xh} + {r} * ({h} @ {rh}{bias})" if linear else f"{xh} + ({r} * {h}) @ {rh}{bias}"
            cand = emit.temp(g(layer.gates(emit, pre, f"n{d}_{t}")), layer.dtype, layer.state, f"cand{d}_{t}").name
            new = emit.temp(f"(1.0 - {z}) * {cand} + {z} * {h}", layer.dtype, layer.state, f"h{d}_{t}").name
            run.output(emit, new, t)
            h = run.kept(emit, new, h, t, f"h{d}_{t}")
        passes.append(run)
        finals.append([h])
    return _outputs(node, layer, emit, passes, finals)


@converter("LSTM")
def lstm(node: OnnxNode, emit: Emitter) -> list[Value]:
    layer, directions, texts = _inputs(node, emit)
    acts = _activations(node, layer.dtype, directions)
    couple = bool(node.attr("input_forget", 0))
    passes, finals = [], []
    for d in range(directions):
        f, g, hf = acts[d]
        xw = _projection(layer, emit, texts, d, 4)
        rt = emit.temp(f"transpose({texts['r']}[{d}])", layer.dtype, (layer.hidden, layer.hidden * 4), f"rt{d}").name
        peep = [layer.cols(f"{texts['p']}[{d}]", k) for k in range(3)] if texts.get("p") else None
        h, c = _start(layer, emit, texts, "h0", d), _start(layer, emit, texts, "c0", d)
        run = _Pass(layer, emit, xw, d)
        for t in run.times:
            gates = emit.temp(
                f"{run.xw}[{t}] + {h} @ {rt}", layer.dtype, (layer.batch, layer.hidden * 4), f"gates{d}_{t}"
            ).name
            pre_i, pre_o, pre_f, pre_c = (layer.cols(gates, k) for k in range(4))
            if peep:
                pre_i, pre_f = f"{pre_i} + {peep[0]} * {c}", f"{pre_f} + {peep[2]} * {c}"
            i = emit.temp(f(layer.gates(emit, pre_i, f"i{d}_{t}")), layer.dtype, layer.state, "in").name
            forget = f"1.0 - {i}" if couple else f(layer.gates(emit, pre_f, f"f{d}_{t}"))
            fg = emit.temp(forget, layer.dtype, layer.state, "forget").name
            cand = g(layer.gates(emit, pre_c, f"g{d}_{t}"))
            new_c = emit.temp(f"{fg} * {c} + {i} * {cand}", layer.dtype, layer.state, f"c{d}_{t}").name
            if peep:
                pre_o = f"{pre_o} + {peep[1]} * {new_c}"
            o = emit.temp(f(layer.gates(emit, pre_o, f"o{d}_{t}")), layer.dtype, layer.state, "out").name
            new = emit.temp(f"{o} * {hf(new_c)}", layer.dtype, layer.state, f"h{d}_{t}").name
            run.output(emit, new, t)
            h, c = run.kept(emit, new, h, t, f"h{d}_{t}"), run.kept(emit, new_c, c, t, f"c{d}_{t}")
        passes.append(run)
        finals.append([h, c])
    return _outputs(node, layer, emit, passes, finals)
