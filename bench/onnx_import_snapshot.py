"""What `catenc import` writes for every ONNX node test and the tiny real networks, one file each,
so two trees can be compared byte for byte (a refactor of the importer must change nothing).

    python bench/onnx_import_snapshot.py OUT [--models DIR] [--export]

Each node test is imported as `catenc test-runtime --suite onnx` imports it, then again with the
inputs it needs at compile time made constants (--freeze-shape-inputs). A file holds the composite
text and the sha256 of each constant, or the diagnostic when the import fails. `--export` writes
the networks' ONNX files (torch) to DIR first; without it the ones already there are imported.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import warnings
from pathlib import Path

from catenc.diagnostics import CatencError
from catenc.onnx.importer import import_model
from catenc.testing.onnx_nodes import collect_tests, freeze_inputs

ROOT = Path(__file__).resolve().parent


def snapshot(path: Path, display: str, name: str) -> tuple[str, CatencError | None]:
    """The import's text and constants' digests, or its diagnostic."""
    try:
        imported = import_model(str(path), display, name)
    except CatencError as err:
        more = "".join(f"\n{m.message}" for m in err.more)
        return f"error: {err.message}{more}\n", err
    except Exception as err:  # an internal error is a difference too
        return f"internal: {type(err).__name__}: {err}\n", None
    digests = [
        f"# {n} {imported.dtypes[n]} {hashlib.sha256(a.tobytes()).hexdigest()}" for n, a in imported.constants.items()
    ]
    return imported.text + "\n".join(digests) + "\n", None


def node_tests(out: Path, scratch: Path) -> int:
    count = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tests = collect_tests()
    for test in tests:
        model_path = scratch / f"{test.name}.onnx"
        model_path.write_bytes(test.model.SerializeToString())
        text, err = snapshot(model_path, f"{test.name}/model.onnx", test.name)
        (out / f"{test.name}.txt").write_text(text)
        count += 1
        frozen = freeze_inputs(test, err) if err is not None else None
        while frozen is not None:  # as plan_test: freeze again while the import names more inputs
            model_path.write_bytes(frozen.model.SerializeToString())
            text, err = snapshot(model_path, f"{test.name}/model.onnx", test.name)
            (out / f"{test.name}.frozen{len(frozen.frozen)}.txt").write_text(text)
            count += 1
            frozen = freeze_inputs(frozen, err) if err is not None else None
    return count


def export_networks(models: Path) -> None:
    sys.path.insert(0, str(ROOT))
    import onnx_models

    for name in onnx_models.MODELS:
        model = onnx_models.build(name, "tiny")
        onnx_models.export(model, models / f"{name}.onnx")
    resnet = onnx_models.build("resnet18", "tiny")
    onnx_models.export(resnet, models / "resnet18_dynamic.onnx", dynamic=True, keep_batchnorm=True)


def networks(out: Path, models: Path) -> int:
    paths = sorted(models.glob("*.onnx"))
    for path in paths:
        text, _ = snapshot(path, path.name, None)
        (out / f"net_{path.stem}.txt").write_text(text)
    return len(paths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", type=Path, default=Path("/tmp/onnx_snapshot_models"))
    parser.add_argument("--export", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.export:
        export_networks(args.models)
    with tempfile.TemporaryDirectory() as scratch:
        count = node_tests(args.out, Path(scratch))
    count += networks(args.out, args.models)
    print(f"{count} imports written to {args.out}")


if __name__ == "__main__":
    main()
