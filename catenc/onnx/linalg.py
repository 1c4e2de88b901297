"""Matrix products: MatMul and Gemm (the body's `@`, numpy's matmul semantics)."""

from __future__ import annotations

from catenc.onnx.elementwise import result_shape
from catenc.onnx.errors import ModelError
from catenc.onnx.registry import OnnxNode, converter
from catenc.onnx.values import Shape, Value, broadcast, known_value, static


def matmul_shape(a: Shape, b: Shape) -> Shape:
    """numpy.matmul's result shape (1-D operands promoted and the added axis dropped)."""
    if not a or not b:
        raise ModelError("matmul of a scalar")
    a2 = a if len(a) > 1 else (a[0],)
    b2 = b if len(b) > 1 else (b[0],)
    inner_a = a2[-1]
    inner_b = b2[-2] if len(b) > 1 else b2[0]
    if inner_a != inner_b:
        raise ModelError(f"inner dimensions {inner_a} and {inner_b} differ")
    batch = broadcast(a[:-2], b[:-2])
    if batch is None:
        raise ModelError("batch dimensions do not broadcast")
    rows = a[-2:-1] if len(a) > 1 else ()
    cols = b[-1:] if len(b) > 1 else ()
    return batch + rows + cols


@converter("MatMul")
def matmul(node: OnnxNode, emit) -> list[Value]:
    a, b = node.need(0), node.need(1)
    shape = matmul_shape(a.shape, b.shape)
    return [emit.out(f"{emit.text(a)} @ {emit.text(b)}", a.dtype, shape)]


def transposed(value: Value, emit, fold: bool = True) -> tuple[str, Shape]:
    """A 2-D operand transposed: folded into a new constant when known (a weight) and ``fold``, else `.T`."""
    if fold and value.is_known and value.known.dtype != object:
        t = known_value(value.known.T.copy(), value.dtype)
        emit.hint_like(t, value, "_T")
        return emit.text(t), t.shape
    return f"{emit.text(value)}.T", value.shape[::-1]


@converter("Gemm")
def gemm(node: OnnxNode, emit) -> list[Value]:
    a, b, c = node.need(0), node.need(1), node.input(2)
    if a.rank != 2 or b.rank != 2:
        raise ModelError(f"A and B must be 2-D (got ranks {a.rank} and {b.rank})")
    ta, sa = transposed(a, emit) if node.attr("transA", 0) else (emit.text(a), a.shape)
    # A matrix-vector product (one row of A: a classifier at batch 1) reads B[N, K] row by row, contiguously;
    # B folded to [K, N] would be read with a stride of N (MobileNetV2's 1280x1000 classifier 633 -> 117 us)
    tb, sb = (
        transposed(b, emit, fold=static(a.shape[:1]) != (1,)) if node.attr("transB", 0) else (emit.text(b), b.shape)
    )
    shape = matmul_shape(sa, sb)
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    expr = f"{ta} @ {tb}"
    if alpha != 1.0:
        expr = f"{alpha!r} * ({expr})"
    if c is not None and beta != 0.0:
        result_shape(node, [Value(a.dtype, shape), c])
        if broadcast(shape, c.shape) != shape:
            raise ModelError("C does not broadcast to the shape of A @ B")
        expr += f" + {emit.text(c)}" if beta == 1.0 else f" + {beta!r} * {emit.text(c)}"
    return [emit.out(expr, a.dtype, shape)]
