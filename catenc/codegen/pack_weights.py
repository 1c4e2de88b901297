"""Weights packed once, at load (--weights packed; docs/abi.md, "Packed weights").

The entry reads its constants from a block the caller allocates once and NAME_pack_weights fills
from the weights file's data section: each constant the entry's code reads lies in it as its baked
array would (codegen/prepack.py): its values unless only its panels are read, then the gemm panels
or Winograd filter transform it holds, 64-byte aligned. So the kernels read the panels in place, as
with baked constants, and the weights file stays the user's format: any file of the same layout
packs, and after packing the library no longer reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from catenc.codegen.jinja import environment
from catenc.codegen.prepack import Appendix, Prepacked, product_of
from catenc.frontend.typed import TType
from catenc.schedule.tiles import KINDS, slice_depth
from catenc.weights import Placed

MAX_AXES = 16  # of a packed operand's outer positions (catenc_pack_panels's digits)
ALIGN = 64  # each constant's place in the block, and the block itself (as a workspace's)
_ENV = environment()


@dataclass(frozen=True)
class PackedConstant:
    """One constant in the block: its code name and type, its tensor in the weights data, its byte
    offset `at` in the block, whether its values are there (else its panels alone), and what follows."""

    name: str
    ttype: TType
    data: Placed
    at: int
    values: bool
    appendix: Appendix | None

    @property
    def nbytes(self) -> int:
        size = self.ttype.dtype.itemsize
        after = 0 if self.appendix is None else self.appendix.pad + self.appendix.elements
        return (self.data.nbytes if self.values else 0) + after * size


@dataclass(frozen=True)
class PackedLayout:
    constants: tuple[PackedConstant, ...]
    nbytes: int  # of the whole block


def packed_layout(placed: list[tuple[str, TType, Placed]], used: set[str], packed: Prepacked) -> PackedLayout:
    """Where each constant of an entry that its code reads (`used`) lies in its block (`placed`: its
    constants in order, with their tensors in the weights data)."""
    constants, at = [], 0
    for name, ttype, data in placed:
        if name not in used:
            continue
        constant = PackedConstant(name, ttype, data, at, name not in packed.replaced, packed.appended.get(name))
        constants.append(constant)
        at += -(-constant.nbytes // ALIGN) * ALIGN
    return PackedLayout(tuple(constants), at)


def _axes(axes: tuple[tuple[int, int], ...]) -> str:
    """An operand's (coefficient, extent) axes as a C initializer of catenc_pack_axis."""
    return "{" + ", ".join(f"{{{c}, {e}}}" for c, e in axes) + "}" if axes else "{{0, 1}}"


def _pack_statement(constant: PackedConstant, source_bytes: str, target_bytes: str) -> list[str]:
    """What fills the part of a constant's place that follows its values: its panels or filter transform."""
    appendix = constant.appendix
    if appendix.source is not None and len(appendix.source.outer) > MAX_AXES:
        raise ValueError(f"{constant.name}: a packed operand of more than {MAX_AXES} outer axes")
    size = constant.ttype.dtype.itemsize
    target = (
        f"{target_bytes} + {constant.at + ((constant.data.nbytes if constant.values else 0) + appendix.pad * size)}"
    )
    source = f"{source_bytes} + {constant.data.offset}"
    if appendix.plan is not None:
        conv = appendix.plan.conv
        wk, wc, wr, ws = conv.weight_strides
        fields = f"p.w = (const float*)({source}); p.w0 = {conv.weight_at}; p.wk = {wk}; p.wc = {wc}; "
        fields += f"p.wr = {wr}; p.ws = {ws}; p.C = {conv.channels}; p.K = {conv.filters};"
        call = f"catenc_wino{appendix.plan.transform.m}_filters_f32(&p, 0, {conv.filters}, (float*)({target}));"
        return [
            f"{{ /* {constant.name}: its Winograd filter transform */",
            "    catenc_wino_f32 p;",
            "    memset(&p, 0, sizeof p);",
            f"    {fields}",
            f"    {call}",
            "}",
        ]
    src = appendix.source
    tiles, group = appendix.tiles, KINDS[appendix.kind].group
    depth, outer = (product_of(axes) for axes in (src.depth, src.outer))
    width = tiles.mr if src.side == "a" else tiles.nr
    kc = slice_depth(tiles, depth, group) if depth else 1
    return [
        f"{{ /* {constant.name}: its gemm {src.side.upper()} panels */",
        f"    static const catenc_pack_axis depth[] = {_axes(src.depth)}, outer[] = {_axes(src.outer)};",
        f"    catenc_pack_panels({target}, {source}, {size}, {src.offset}, depth, {max(len(src.depth), 1)}, outer, "
        f"{max(len(src.outer), 1)}, {depth}, {outer}, {width}, {kc}, {group});",
        "}",
    ]


def render_pack_functions(symbols: tuple[str, str], layout: PackedLayout, weights: str, block: str) -> str:
    """An entry's NAME_packed_weights_bytes and NAME_pack_weights (`symbols`, in that order; `weights`
    and `block`: the names of the data section's parameter and the block's)."""
    lines = [
        f"memcpy(to + {c.at}, from + {c.data.offset}, {c.data.nbytes}); /* {c.name}: {c.ttype} */"
        for c in layout.constants
        if c.values
    ]
    for c in layout.constants:
        if c.appendix is not None:
            lines += _pack_statement(c, "from", "to")
    need = layout.nbytes
    if need:
        fill = [
            f"const unsigned char* const from = (const unsigned char*){weights};",
            f"unsigned char* const to = (unsigned char*){block};",
            f"if ({weights} == NULL || {block} == NULL || {block}_bytes < {need}",
            f"    || ((uintptr_t){block} % {ALIGN}u) != 0)",
            "    return CATENC_E_WORKSPACE;",
            f"memset(to, 0, {need}); /* the padding and the panels' zeros */",
            *lines,
        ]
    else:  # the entry's code reads none of its constants
        fill = [f"(void){weights};", f"(void){block};", f"(void){block}_bytes;"]
    return "\n".join(
        [
            f"size_t {symbols[0]}(void)",
            "{",
            f"    return {need};",
            "}",
            "",
            f"int {symbols[1]}(const void* {weights}, void* {block}, size_t {block}_bytes)",
            "{",
            *(f"    {line}" for line in fill),
            "    return CATENC_OK;",
            "}",
        ]
    )


def pack_declarations(symbols: tuple[str, str], weights: str, block: str) -> list[str]:
    """The header's declarations of an entry's packing functions (`symbols` as render_pack_functions's)."""
    return [
        f"size_t {symbols[0]}(void);",
        f"int {symbols[1]}(const void* {weights}, void* {block}, size_t {block}_bytes);",
    ]


def render_pack_support() -> str:
    """The helper the packing functions share: a constant's gemm operand as the driver's panels."""
    return _ENV.get_template("pack_weights.c.j2").render()
