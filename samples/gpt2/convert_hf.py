"""Convert a Hugging Face GPT-2 small checkpoint (`model.safetensors` of `gpt2`) into the
weights file of the catenc sample (see weights.py).

    python samples/gpt2/convert_hf.py model.safetensors build/gpt2/weights.safetensors

Hugging Face names each layer's tensors apart (`h.3.attn.c_attn.weight`, maybe under a
`transformer.` prefix) and stores its Conv1D weights [in, out]; the sample stacks the 12
layers of each kind and stores linear weights [out, in]. F16 and BF16 checkpoints are widened
to f32. The tied output head (`lm_head.weight`) and the causal-mask buffers are not needed.
"""

from __future__ import annotations

import sys

import numpy as np
import weights

# sample name -> (Hugging Face name, with {layer} for stacked kinds; transposed)
SOURCES = {
    "wte": ("wte.weight", False),
    "wpe": ("wpe.weight", False),
    "ln1_w": ("h.{layer}.ln_1.weight", False),
    "ln1_b": ("h.{layer}.ln_1.bias", False),
    "attn_w": ("h.{layer}.attn.c_attn.weight", True),
    "attn_b": ("h.{layer}.attn.c_attn.bias", False),
    "proj_w": ("h.{layer}.attn.c_proj.weight", True),
    "proj_b": ("h.{layer}.attn.c_proj.bias", False),
    "ln2_w": ("h.{layer}.ln_2.weight", False),
    "ln2_b": ("h.{layer}.ln_2.bias", False),
    "fc_w": ("h.{layer}.mlp.c_fc.weight", True),
    "fc_b": ("h.{layer}.mlp.c_fc.bias", False),
    "fcproj_w": ("h.{layer}.mlp.c_proj.weight", True),
    "fcproj_b": ("h.{layer}.mlp.c_proj.bias", False),
    "lnf_w": ("ln_f.weight", False),
    "lnf_b": ("ln_f.bias", False),
}


def convert(hf: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The sample's tensors from a Hugging Face GPT-2 small state dict."""
    hf = {name.removeprefix("transformer."): array for name, array in hf.items()}

    def get(name: str, transpose: bool) -> np.ndarray:
        if name not in hf:
            raise SystemExit(f"error: the checkpoint has no tensor '{name}' (is it GPT-2 small?)")
        array = np.asarray(hf[name], dtype=np.float32)
        return array.T if transpose else array

    out = {}
    for target, (source, transpose) in SOURCES.items():
        if "{layer}" in source:
            array = np.stack([get(source.format(layer=k), transpose) for k in range(weights.LAYERS)])
        else:
            array = get(source, transpose)
        if array.shape != weights.SHAPES[target]:
            raise SystemExit(f"error: {source} has shape {list(array.shape)}; GPT-2 small's is different")
        out[target] = np.ascontiguousarray(array)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python samples/gpt2/convert_hf.py HF_MODEL.safetensors OUT.safetensors")
    weights.write(sys.argv[2], convert(weights.read(sys.argv[1])), {"format": "catenc-gpt2", "source": "huggingface"})
    print(f"wrote {sys.argv[2]}")
