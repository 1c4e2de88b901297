"""GPT-2 small weights in one safetensors file: the layout, and reading and writing it.

The file is plain safetensors (an 8-byte little-endian header length, a JSON header, the raw
little-endian data): one F32 tensor per input of the `gpt2` composite, named as the input,
the 12 layers stacked first and linear weights stored [out, in] (torch.nn.Linear's layout;
Hugging Face's Conv1D stores [in, out], which `convert_hf.py` transposes). The header is padded
so that the data starts 64 bytes in, and every tensor starts at a multiple of 64 bytes: a C
program can mmap the file and pass pointers into it.

    python samples/gpt2/weights.py build/gpt2/weights.safetensors   # deterministic random weights
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np

VOCAB, POSITIONS, CHANNELS, LAYERS, HEADS = 50257, 1024, 768, 12, 12

SHAPES: dict[str, tuple[int, ...]] = {
    "wte": (VOCAB, CHANNELS),
    "wpe": (POSITIONS, CHANNELS),
    "ln1_w": (LAYERS, CHANNELS),
    "ln1_b": (LAYERS, CHANNELS),
    "attn_w": (LAYERS, 3 * CHANNELS, CHANNELS),
    "attn_b": (LAYERS, 3 * CHANNELS),
    "proj_w": (LAYERS, CHANNELS, CHANNELS),
    "proj_b": (LAYERS, CHANNELS),
    "ln2_w": (LAYERS, CHANNELS),
    "ln2_b": (LAYERS, CHANNELS),
    "fc_w": (LAYERS, 4 * CHANNELS, CHANNELS),
    "fc_b": (LAYERS, 4 * CHANNELS),
    "fcproj_w": (LAYERS, CHANNELS, 4 * CHANNELS),
    "fcproj_b": (LAYERS, CHANNELS),
    "lnf_w": (CHANNELS,),
    "lnf_b": (CHANNELS,),
}
NAMES = tuple(SHAPES)  # the order of the composite's weight inputs
ALIGN = 64


def random_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic GPT-2-shaped weights with GPT-2's initialisation scales (normal, std 0.02;
    the residual projections scaled by 1/sqrt(2 * layers); layernorm gains near 1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in SHAPES.items():
        if name.endswith("_b"):
            out[name] = (rng.standard_normal(shape, dtype=np.float32) * 0.01).astype(np.float32)
        elif name.startswith("ln"):
            out[name] = (1.0 + rng.standard_normal(shape, dtype=np.float32) * 0.05).astype(np.float32)
        else:
            std = 0.02 / np.sqrt(2 * LAYERS) if name in ("proj_w", "fcproj_w") else 0.02
            out[name] = (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)
    return out


def write(path: str | Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Write tensors (every one f32, in NAMES order) as 64-byte-aligned safetensors."""
    header: dict[str, object] = {"__metadata__": dict(metadata or {"format": "catenc-gpt2"})}
    offset = 0
    for name in NAMES:
        array = tensors[name]
        if array.dtype != np.float32 or array.shape != SHAPES[name]:
            raise ValueError(f"{name}: expected f32{list(SHAPES[name])}, got {array.dtype}{list(array.shape)}")
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += -(-array.nbytes // ALIGN) * ALIGN
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(len(text) + 8) % ALIGN)  # the data starts 64-byte aligned
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in NAMES:
            data = np.ascontiguousarray(tensors[name]).astype("<f4", copy=False).tobytes()
            f.write(data + b"\0" * (-len(data) % ALIGN))


def read(path: str | Path, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file (F32, F16 or BF16 become float32), mapped, not copied
    where already f32."""
    path = Path(path)
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or (names is not None and name not in names):
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if info["dtype"] == "F32":
            array = raw.view("<f4")
        elif info["dtype"] == "F16":
            array = raw.view("<f2").astype(np.float32)
        elif info["dtype"] == "BF16":
            array = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: {name} has dtype {info['dtype']}; expected F32, F16 or BF16")
        out[name] = array.reshape(info["shape"])
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python samples/gpt2/weights.py OUT.safetensors")
    write(sys.argv[1], random_weights(), {"format": "catenc-gpt2", "weights": "random, seed 0"})
    print(f"wrote {sys.argv[1]}")
