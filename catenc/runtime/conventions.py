"""Calling conventions of the emitted entries (docs/abi.md): a runtime descriptor names one in its
`calling_convention` field (docs/runtimes.md); the entry's signature, its header and the loader read
what it implies here, so that none of them branches on a backend's name."""

from __future__ import annotations

from dataclasses import dataclass

from catenc.codegen.c import CRenderer
from catenc.codegen.gpu import CudaRenderer
from catenc.codegen.names import Reserved
from catenc.diagnostics import CatencError


@dataclass(frozen=True)
class CallingConvention:
    """What an entry of this convention takes beyond the C ABI's arguments, and what its header needs."""

    name: str
    languages: str  # the languages whose code may include the header, for its comments
    header_reserved: Reserved  # what the header's parameter names must avoid
    trailing: tuple[tuple[str, str], ...] = ()  # (name, which is also its role; C type) after workspace_bytes
    declarations: tuple[str, ...] = ()  # what the header declares before its entries


CALLING_CONVENTIONS: dict[str, CallingConvention] = {
    "host": CallingConvention("host", "C or C++", CRenderer.header_reserved),
    "cuda": CallingConvention(
        "cuda",
        "C, C++ or CUDA",
        CudaRenderer.header_reserved,
        (("stream", "struct CUstream_st*"),),  # the same type as cudaStream_t, without CUDA's headers
        ("struct CUstream_st; /* what cudaStream_t points to: entries run on the stream they are given */",),
    ),
}


def calling_convention(name: str) -> CallingConvention:
    """The convention a runtime descriptor's `calling_convention` names; an error for an unknown one."""
    try:
        return CALLING_CONVENTIONS[name]
    except KeyError:
        known = ", ".join(CALLING_CONVENTIONS)
        raise CatencError(f"calling_convention '{name}' is not one of {known} (docs/runtimes.md)") from None
