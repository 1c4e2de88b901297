"""GPT-2 small in PyTorch, reading the same weights as the catenc sample: the reference the
tests check catenc's logits against, and the peer `make bench` times.

    model = Gpt2(weights.read("build/gpt2/weights.safetensors"))
    logits, k_cache, v_cache = model.prefill(tokens)          # tokens: int64[T]
    logits, k_new, v_new = model.step(token, k_cache, v_cache) # caches: [S, 12, 12, 64]

It follows Hugging Face's GPT2LMHeadModel (pre-LN blocks, gelu_tanh MLP, tied embedding), with
linear weights stored [out, in] as in the weights file.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

HEADS = 12


class Gpt2:
    def __init__(self, tensors: dict[str, np.ndarray], dtype: torch.dtype = torch.float32) -> None:
        self.w = {name: torch.from_numpy(np.ascontiguousarray(array)).to(dtype) for name, array in tensors.items()}
        self.layers = self.w["ln1_w"].shape[0]
        self.channels = self.w["wte"].shape[1]

    def _block(self, layer: int, x: torch.Tensor, past_k=None, past_v=None):
        w, c = self.w, self.channels
        h = F.layer_norm(x, (c,), w["ln1_w"][layer], w["ln1_b"][layer], 1e-5)
        q, k, v = F.linear(h, w["attn_w"][layer], w["attn_b"][layer]).split(c, dim=-1)
        t = x.shape[0]
        q, k, v = (a.reshape(t, HEADS, c // HEADS) for a in (q, k, v))
        keys = k if past_k is None else torch.cat([past_k, k], 0)
        values = v if past_v is None else torch.cat([past_v, v], 0)
        a = F.scaled_dot_product_attention(
            q.transpose(0, 1), keys.transpose(0, 1), values.transpose(0, 1), is_causal=past_k is None
        )
        x = x + F.linear(a.transpose(0, 1).reshape(t, c), w["proj_w"][layer], w["proj_b"][layer])
        h = F.layer_norm(x, (c,), w["ln2_w"][layer], w["ln2_b"][layer], 1e-5)
        m = F.gelu(F.linear(h, w["fc_w"][layer], w["fc_b"][layer]), approximate="tanh")
        return x + F.linear(m, w["fcproj_w"][layer], w["fcproj_b"][layer]), k, v

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        w = self.w
        return F.linear(F.layer_norm(x, (self.channels,), w["lnf_w"], w["lnf_b"], 1e-5), w["wte"])

    @torch.inference_mode()
    def prefill(self, tokens: np.ndarray):
        """Logits [T, V] of every position, and the caches [T, layers, heads, 64]."""
        ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
        x = self.w["wte"][ids] + self.w["wpe"][: ids.shape[0]]
        ks, vs = [], []
        for layer in range(self.layers):
            x, k, v = self._block(layer, x)
            ks.append(k)
            vs.append(v)
        return self._head(x), torch.stack(ks, 1), torch.stack(vs, 1)

    @torch.inference_mode()
    def step(self, token: int, past_k: torch.Tensor, past_v: torch.Tensor):
        """Logits [V] of one token at position S given caches [S, layers, heads, 64], and its
        keys and values [layers, heads, 64]."""
        s = past_k.shape[0]
        past_k, past_v = torch.as_tensor(past_k), torch.as_tensor(past_v)
        x = self.w["wte"][int(token)][None] + self.w["wpe"][s][None]
        ks, vs = [], []
        for layer in range(self.layers):
            x, k, v = self._block(layer, x, past_k[:, layer], past_v[:, layer])
            ks.append(k[0])
            vs.append(v[0])
        return self._head(x)[0], torch.stack(ks, 0), torch.stack(vs, 0)

    def generate(self, prompt: np.ndarray, steps: int) -> list[int]:
        """Greedy decoding with the cache: the prompt's continuation, `steps` token ids."""
        logits, k, v = self.prefill(prompt)
        out = [int(logits[-1].argmax())]
        for _ in range(steps - 1):
            logits, k_new, v_new = self.step(out[-1], k, v)
            k, v = torch.cat([k, k_new[None]], 0), torch.cat([v, v_new[None]], 0)
            out.append(int(logits.argmax()))
        return out
