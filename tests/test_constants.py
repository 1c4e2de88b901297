"""Constants and weights files (docs/language.md, "Constants and weights files"; docs/cli.md,
`--weights`): a composite's constants, read from a safetensors file, baked into the library or
passed as external inputs, each build run and compared with numpy; their diagnostics; `--test`;
the weights file as a file the compile read (manifest, depfile, compile cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from catenc.build import BuildRequest, build
from catenc.cli import main
from catenc.diagnostics import CatencError
from catenc.driver import plan_file
from catenc.dtypes import DTYPES, bf16_to_f32
from catenc.frontend.composites import composite_file_from_text
from catenc.loader import ManifestError, load
from catenc.plan import Options, WeightsMode
from catenc.runtime.descriptor import load_runtime
from catenc.weights import read_weights, weights_bytes

NET = """\
[composite.net]
inputs = ["x: f32[N, 4]"]
outputs = ["y: f32[N, 3]", "z: f64[N]", "wc: f32[4, 3]", "hc: f16[3]"]
weights = "net.safetensors"
constants = ["w: f32[4, 3]", "b: f32[3]", "scale: f32", "table: f64[5]", "mask: bool[3]", "h: f16[3]",
             "bb: bf16[3]", "k: i32[3]"]
body = \"\"\"
y = where(mask, x @ w + b * scale, cast(h, f32) + cast(bb, f32) + cast(k, f32))
z = cast(sum(x, axis=1), f64) * sum(table)
wc = w
hc = h
\"\"\"
"""
NAN_BITS = 0x7FC00123  # a NaN with a payload: baked constants keep their exact bits


def tensors() -> dict[str, tuple[object, np.ndarray]]:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    w.view(np.uint32)[0, 0] = NAN_BITS
    values = {
        "w": w,
        "b": rng.standard_normal(3).astype(np.float32),
        "scale": np.array(1.5, np.float32),
        "table": rng.standard_normal(5),
        "mask": np.array([True, False, True]),
        "h": np.array([1.0, 2.0, -0.5], np.float16),
        "bb": np.array([0x3F80, 0x4000, 0xBF00], np.uint16),  # bf16 bits: 1, 2, -0.5
        "k": np.array([7, -3, 2], np.int32),
    }
    dtypes = {"w": "f32", "b": "f32", "scale": "f32", "table": "f64", "mask": "bool", "h": "f16", "bb": "bf16"}
    return {name: (DTYPES[dtypes.get(name, "i32")], value) for name, value in values.items()}


def expected(x: np.ndarray) -> list[np.ndarray]:
    t = {name: value for name, (_, value) in tensors().items()}
    w = t["w"].copy()
    w[0, 0] = 0.0  # the NaN only reaches column 0 of y; checked apart
    other = t["h"].astype(np.float32) + bf16_to_f32(t["bb"]) + t["k"].astype(np.float32)
    y = np.where(t["mask"], x @ w + t["b"] * t["scale"], other)
    z = x.sum(axis=1).astype(np.float64) * t["table"].sum()
    return [y, z]


def write_project(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "net.safetensors").write_bytes(weights_bytes(tensors()))
    (directory / "net.toml").write_text(NET)
    return directory / "net.toml"


def compile_in_process(path: Path, out_dir: Path, weights: str) -> dict[str, str]:
    options = Options(load_runtime("clang"), weights=WeightsMode(weights))
    plan = plan_file(str(path), options)
    return build(plan, options, BuildRequest(str(path), str(out_dir), ("c", "h", "manifest", "so")))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return write_project(tmp_path_factory.mktemp("constants"))


@pytest.fixture(scope="module")
def baked(project: Path) -> dict[str, str]:
    return compile_in_process(project, project.parent / "baked", "baked")


@pytest.fixture(scope="module")
def external(project: Path) -> dict[str, str]:
    return compile_in_process(project, project.parent / "external", "external")


def check_outputs(outputs, x: np.ndarray) -> None:
    y, z, wc, hc = outputs
    want_y, want_z = expected(x)
    np.testing.assert_allclose(y[:, 1:], want_y[:, 1:], rtol=1e-5, atol=1e-5)
    assert np.isnan(y[:, 0]).all(), "column 0 of y reads the NaN of w"
    np.testing.assert_allclose(z, want_z, rtol=1e-12)
    assert wc.view(np.uint32)[0, 0] == NAN_BITS
    assert wc.tobytes() == tensors()["w"][1].tobytes()
    assert hc.tobytes() == tensors()["h"][1].tobytes()


def test_baked_constants_leave_the_signature_and_compute_with_their_values(baked: dict[str, str]) -> None:
    manifest = json.loads(Path(baked["manifest"]).read_text())
    (entry,) = manifest["entries"]
    assert [(a["name"], a["role"]) for a in entry["args"] if a["role"] == "input"] == [("x", "input")]
    assert (
        entry["prototype"]
        == "int net(const float* x, float* y, double* z, float* wc, uint16_t* hc, int64_t N, void* workspace, "
        "size_t workspace_bytes)"
    )
    assert not any(f["role"] == "weights" for f in manifest["files"])
    source = Path(baked["c"]).read_text()
    assert "__attribute__((aligned(64))) net_const_0" in source
    assert "constant w: f32[4, 3] (baked into the library)" in Path(baked["h"]).read_text()
    x = np.random.default_rng(2).standard_normal((7, 4)).astype(np.float32)
    check_outputs(load(baked["manifest"])["net"](x), x)


def test_external_constants_are_one_weights_argument(external: dict[str, str]) -> None:
    manifest = json.loads(Path(external["manifest"]).read_text())
    (entry,) = manifest["entries"]
    assert [(a["name"], a["role"]) for a in entry["args"][:3]] == [
        ("x", "input"),
        ("weights", "weights"),
        ("y", "output"),
    ]
    assert entry["prototype"].startswith("int net(const float* x, const void* weights, float* y, ")
    weights_path = Path(external["manifest"]).parent / "net.safetensors"
    assert {"path": "net.safetensors", "role": "weights"}.items() <= manifest["files"][-1].items()
    written = read_weights(str(weights_path))
    names = ["w", "b", "scale", "table", "mask", "h", "bb", "k"]
    assert list(written) == ["table", "w", "b", "scale", "k", "h", "bb", "mask"]  # widest elements first
    arg = entry["args"][1]
    assert arg["file"] == "net.safetensors" and arg["bytes"] == 5 * 8 + 19 * 4 + 6 * 2 + 3
    assert [t["name"] for t in arg["tensors"]] == names
    for record in arg["tensors"]:
        tensor = written[record["name"]]
        assert (record["dtype"], record["shape"], record["offset"]) == (
            tensor.dtype.name,
            list(tensor.shape),
            tensor.offset,
        )
        assert record["offset"] % tensor.dtype.itemsize == 0
    raw = weights_path.read_bytes()
    assert (8 + int.from_bytes(raw[:8], "little")) % 64 == 0  # the data starts 64-byte aligned in the file
    for name, (dtype, value) in tensors().items():
        assert written[name].dtype is dtype and written[name].data.tobytes() == value.tobytes()
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    check_outputs(load(external["manifest"])["net"](x), x)


def test_the_loader_takes_another_weights_file_of_the_same_layout(external: dict[str, str], tmp_path: Path) -> None:
    changed = dict(tensors())
    changed["b"] = (DTYPES["f32"], np.full(3, 100.0, np.float32))
    (tmp_path / "other.safetensors").write_bytes(weights_bytes(changed))
    x = np.random.default_rng(4).standard_normal((2, 4)).astype(np.float32)
    y = load(external["manifest"], weights=tmp_path / "other.safetensors")["net"](x)[0]
    want = expected(x)[0] + np.where(tensors()["mask"][1], (100.0 - tensors()["b"][1]) * 1.5, 0.0)
    np.testing.assert_allclose(y[:, 1:], want[:, 1:], rtol=1e-5, atol=1e-4)
    del changed["k"]
    changed["k2"] = (DTYPES["i32"], np.zeros(3, np.int32))
    (tmp_path / "renamed.safetensors").write_bytes(weights_bytes(changed))
    with pytest.raises(ManifestError, match=r"no tensor 'k' \(i32\[3\] at byte 104; a file catenc wrote"):
        load(external["manifest"], weights=tmp_path / "renamed.safetensors")["net"](x)
    changed = dict(tensors())
    changed["b"] = (DTYPES["f32"], np.zeros(4, np.float32))
    (tmp_path / "reshaped.safetensors").write_bytes(weights_bytes(changed))
    with pytest.raises(
        ManifestError, match=r"tensor 'b' is f32\[4\] at byte 88, the library reads f32\[3\] at byte 88"
    ):
        load(external["manifest"], weights=tmp_path / "reshaped.safetensors")["net"](x)


def test_outputs_do_not_depend_on_the_hash_seed(project: Path, tmp_path: Path) -> None:
    def run(seed: str, out: str) -> dict[str, bytes]:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        argv = [sys.executable, "-m", "catenc", "compile", str(project), "-o", str(tmp_path / out), "-S"]
        for weights in ("baked", "external"):
            subprocess.run([*argv, "--weights", weights, "-o", str(tmp_path / out / weights)], env=env, check=True)
        return {str(p.relative_to(tmp_path / out)): p.read_bytes() for p in sorted((tmp_path / out).rglob("*.*"))}

    first, second = run("1", "a"), run("2", "b")
    assert first == second
    assert "external/net.safetensors" in first and "baked/net.safetensors" not in first


def test_check_option_gives_constants_their_values(project: Path, tmp_path: Path) -> None:
    for weights in ("baked", "external"):
        out = tmp_path / weights
        result = CliRunner().invoke(
            main, ["compile", str(project), "-o", str(out), "--weights", weights, "--test", "N=5"]
        )
        assert result.exit_code == 0, result.output
        assert result.output.count(" ok") == 4 and "MISMATCH" not in result.output


def test_a_changed_weights_file_is_a_cache_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_project(tmp_path / "src")
    monkeypatch.setenv("CATENC_NO_CACHE", "0")
    monkeypatch.setenv("CATENC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CATENC_VERIFY_IR")
    argv = ["compile", str(path), "-o", str(tmp_path / "out"), "-S", "-v", "-MD"]
    runs = [CliRunner().invoke(main, argv) for _ in range(2)]
    assert [("from the compile cache" in r.output) for r in runs] == [False, True]
    changed = dict(tensors())
    changed["b"] = (DTYPES["f32"], np.ones(3, np.float32))
    (tmp_path / "src" / "net.safetensors").write_bytes(weights_bytes(changed))
    again = CliRunner().invoke(main, argv)
    assert "from the compile cache" not in again.output and "wrote" in again.output
    manifest = json.loads((tmp_path / "out" / "net.manifest.json").read_text())
    assert [i["path"] for i in manifest["inputs"]][:2] == [str(path), str(path.parent / "net.safetensors")]
    assert str(path.parent / "net.safetensors") in (tmp_path / "out" / "net.d").read_text()


HEADER = '[composite.net]\ninputs = ["x: f32[4]"]\noutputs = ["y: f32[4]"]\n'
BODY = 'body = "y = x + c"\n'
GOOD = {"c": (DTYPES["f32"], np.ones(4, np.float32))}
# (lines after HEADER, weights file content (bytes) or None, the diagnostic's place and message)
DIAGNOSTICS = [
    (
        'weights = "w.safetensors"\nconstants = ["d: f32[4]"]\n',
        GOOD,
        "5:15",
        "constant 'd' is not in weights file 'w.safetensors'",
    ),
    (
        'weights = "w.safetensors"\nconstants = ["c: f64[4]"]\n',
        GOOD,
        "5:15",
        "constant 'c' is declared f64[4] but weights file 'w.safetensors' holds F32[4]",
    ),
    (
        'weights = "w.safetensors"\nconstants = ["c: f32[2, 2]"]\n',
        GOOD,
        "5:15",
        "constant 'c' is declared f32[2, 2] but weights file 'w.safetensors' holds F32[4]",
    ),
    (
        'weights = "w.safetensors"\nconstants = ["c: f32[M]"]\n',
        GOOD,
        "5:15",
        "constant 'c' must have integer dims (its value has one shape), not c: f32[M]",
    ),
    (
        'weights = "w.safetensors"\nconstants = ["c: f32[..., 4]"]\n',
        GOOD,
        "5:15",
        "constant 'c' must have integer dims (its value has one shape), not c: f32[..., 4]",
    ),
    (
        'weights = "w.safetensors"\nconstants = ["c: T[4]"]\n',
        GOOD,
        "5:15",
        "constant 'c' needs a dtype, not 'T'; dtypes are bool i8 i16 i32 i64 u8 u16 u32 u64 f16 bf16 f32 f64",
    ),
    ('weights = "w.safetensors"\nconstants = ["x: f32[4]"]\n', GOOD, "5:15", "'x' is declared twice"),
    (
        'params = { c = 1 }\nweights = "w.safetensors"\nconstants = ["c: f32[4]"]\n',
        GOOD,
        "6:15",
        "'c' is both a constant and a param of 'net'",
    ),
    ('constants = ["c: f32[4]"]\n', None, "4:1", "'constants' of 'net' need a 'weights' file holding their values"),
    (
        'weights = "w.safetensors"\nconstants = ["c: f32[4]"]\n',
        None,
        "4:11",
        "weights file 'w.safetensors': cannot read it: No such file or directory",
    ),
    (
        'weights = "w.safetensors"\nconstants = ["c: f32[4]"]\n',
        b"\x05\x00",
        "4:11",
        "weights file 'w.safetensors': the file is truncated (2 bytes, no header)",
    ),
    (
        'weights = "w.safetensors"\nconstants = ["c: f32[4]"]\n',
        b"\xff" * 8 + b"{}",
        "4:11",
        "weights file 'w.safetensors': the header length 18446744073709551615 runs past the end of the file (10 bytes)",
    ),
    (
        'weights = "w.safetensors"\nconstants = ["c: f32[4]"]\n',
        b"\x02" + b"\x00" * 7 + b"[]",
        "4:11",
        "weights file 'w.safetensors': the header is not a JSON object",
    ),
    (
        'weights = "w.safetensors"\nconstants = ["c: f32[4]"]\n',
        weights_bytes(GOOD)[:-4],
        "4:11",
        "weights file 'w.safetensors': tensor 'c' lies at bytes 0..16 of the data, which has 12 (a truncated file?)",
    ),
    (
        'weights = 3\nconstants = ["c: f32[4]"]\n',
        None,
        "4:11",
        "'weights' must be the path of a safetensors file, not an integer",
    ),
]


@pytest.mark.parametrize("lines, content, place, message", DIAGNOSTICS, ids=[d[3][:40] for d in DIAGNOSTICS])
def test_diagnostics(lines: str, content, place: str, message: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("net.toml").write_text(HEADER + lines + BODY)
    if content is not None:
        Path("w.safetensors").write_bytes(content if isinstance(content, bytes) else weights_bytes(content))
    result = CliRunner().invoke(main, ["compile", "net.toml", "-o", "out", "-S"])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[0] == f"net.toml:{place}: error: {message}"
    assert "Traceback" not in result.output and not Path("out").exists()


def test_a_composite_with_constants_cannot_be_called(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("w.safetensors").write_bytes(weights_bytes(GOOD))
    caller = '[composite.top]\ninputs = ["x: f32[4]"]\noutputs = ["y: f32[4]"]\nbody = "y = net(x)"\n'
    Path("net.toml").write_text(HEADER + 'weights = "w.safetensors"\nconstants = ["c: f32[4]"]\n' + BODY + caller)
    result = CliRunner().invoke(main, ["compile", "net.toml", "-o", "out", "-S", "--composite", "top"])
    assert result.exit_code == 1, result.output
    first = result.output.splitlines()[0]
    assert (
        first == "net.toml:10:13: error: 'net' has constants (a weights file), so it can only be compiled as an entry, "
        "not called"
    )


def test_gpu_runtimes_refuse_baked_constants(project: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["compile", str(project), "-o", str(tmp_path / "out"), "-S", "--runtime", "cuda"])
    assert result.exit_code == 1
    assert result.output.splitlines()[0].endswith(
        "error: 'net' has constants, which cannot be baked into cuda source; compile with --weights external to "
        "pass them as arguments"
    )
    done = CliRunner().invoke(
        main, ["compile", str(project), "-o", str(tmp_path / "ext"), "-S", "--runtime", "cuda", "--weights", "external"]
    )
    assert done.exit_code == 0, done.output


def test_constants_in_memory() -> None:
    text = HEADER + 'constants = ["c: f32[4]"]\n' + BODY
    values = {"c": np.arange(4, dtype=np.float32)}
    file = composite_file_from_text(text, "model.onnx", values)
    comp = file.composites["net"]
    assert [str(d) for d in comp.arguments] == ["x: f32[4]", "c: f32[4]"]
    assert comp.constant_values["c"] is values["c"] and comp.weights_file is None
    with pytest.raises(CatencError) as error:
        composite_file_from_text(text, "model.onnx", {"c": np.arange(4.0)})
    assert str(error.value).startswith(
        "model.onnx:4:15: constant 'c' is declared f32[4] but its value in memory is float64[4] (storage: float32)"
    )
    with pytest.raises(CatencError, match="constant 'c' is not in the values given in memory"):
        composite_file_from_text(text, "model.onnx", {})
