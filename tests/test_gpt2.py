"""GPT-2 small compiled by catenc (samples/gpt2) against the PyTorch reference reading the same
weights: the logits and caches of a prompt at T = 1, 7, 64 and 256, and a decoding step with
the cache against recomputing the whole sequence."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import compile_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "samples" / "gpt2"))

import reference  # noqa: E402  (samples/gpt2/reference.py)
import weights  # noqa: E402  (samples/gpt2/weights.py)


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| over max |want| (elementwise ratios blow up at logits near zero)."""
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    lib = compile_file(ROOT / "samples" / "gpt2" / "gpt2.toml", tmp_path_factory.mktemp("gpt2"))
    tensors = weights.random_weights(0)
    return lib, [tensors[name] for name in weights.NAMES], reference.Gpt2(tensors)


@pytest.mark.parametrize("t", [1, 7, 64, 256])
def test_prefill_matches_pytorch(model, t):
    lib, args, torch_model = model
    tokens = np.random.default_rng(t).integers(0, weights.VOCAB, t)
    logits, k_cache, v_cache = lib.gpt2(tokens, *args)
    want, want_k, want_v = (a.numpy() for a in torch_model.prefill(tokens))
    assert logits.shape == (t, weights.VOCAB) and k_cache.shape == (t, 12, 12, 64)
    assert relative_error(logits, want) <= 1e-4
    assert relative_error(k_cache, want_k) <= 1e-4 and relative_error(v_cache, want_v) <= 1e-4


@pytest.mark.parametrize("s", [0, 1, 7, 64])
def test_decode_step_matches_a_full_recompute(model, s):
    lib, args, torch_model = model
    tokens = np.random.default_rng(100 + s).integers(0, weights.VOCAB, s + 1)
    empty = np.zeros((0, 12, 12, 64), np.float32)
    _, past_k, past_v = lib.gpt2(tokens[:s], *args) if s else (None, empty, empty)
    logits, k_new, v_new = lib.gpt2_step(tokens[s], past_k, past_v, *args)
    full, full_k, full_v = lib.gpt2(tokens, *args)
    assert relative_error(logits, full[s]) <= 1e-4
    assert relative_error(k_new, full_k[s]) <= 1e-4 and relative_error(v_new, full_v[s]) <= 1e-4
    want = torch_model.step(int(tokens[s]), past_k, past_v)[0].numpy()
    assert relative_error(logits, want) <= 1e-4


def test_the_weights_file_round_trips(tmp_path):
    tensors = weights.random_weights(1)
    path = tmp_path / "w.safetensors"
    weights.write(path, tensors)
    back = weights.read(path)
    assert list(back) == list(weights.NAMES)
    assert all(np.array_equal(back[n], tensors[n]) for n in weights.NAMES)
    header_end = 8 + int.from_bytes(path.read_bytes()[:8], "little")
    assert header_end % 64 == 0 and sum(a.size for a in back.values()) == 124_439_808


def test_a_hugging_face_checkpoint_converts(tmp_path):
    """A GPT-2 checkpoint laid out as Hugging Face's (per-layer names under `transformer.`,
    Conv1D weights [in, out], extra tensors) converts back to the sample's tensors."""
    import convert_hf

    tensors = weights.random_weights(2)
    hf = {"lm_head.weight": tensors["wte"]}
    for target, (source, transpose) in convert_hf.SOURCES.items():
        for layer in range(weights.LAYERS) if "{layer}" in source else [None]:
            array = tensors[target] if layer is None else tensors[target][layer]
            name = source.format(layer=layer)
            hf[f"transformer.{name}"] = np.ascontiguousarray(array.T if transpose else array)
    hf["transformer.h.0.attn.bias"] = np.tril(np.ones((4, 4), np.float32))  # a mask buffer
    converted = convert_hf.convert(hf)
    assert all(np.array_equal(converted[n], tensors[n]) for n in weights.NAMES)
