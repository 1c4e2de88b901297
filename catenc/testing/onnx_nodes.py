"""`catenc test-runtime --suite onnx`: the ONNX backend node tests through a runtime (docs/cli.md).

Each test (one ONNX node, or its function body for the `_expanded` ones, with inputs and
expected outputs) is imported and planned on its own, so an error names its test; the tests'
entries are then built in batches, one library and one compiler call per batch (a batch that
does not build is split in halves until the culprits are alone), and run in a forked child per
batch, so a crash in generated code is one test's `error`, never the runner's end.

The tests come from the installed onnx package's generators
(`onnx.backend.test.case.node.collect_testcases`) or from data folders (`--node-dir`: a folder per
test holding model.onnx and test_data_set_0/input_N.pb, output_N.pb, as older onnx wheels and
onnx's source tree ship them).
"""

from __future__ import annotations

import faulthandler
import json
import multiprocessing
import os
import pickle
import re
import signal
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from catenc import __version__
from catenc.build import BuildRequest, InternalError, build
from catenc.diagnostics import CatencError
from catenc.driver import plan_entry, search_dirs
from catenc.dtypes import DType, from_storage
from catenc.frontend.composites import CompositeFile, Library, load_composite_file
from catenc.loader import load
from catenc.plan import EntryPlan, FilePlan, Options
from catenc.runtime.descriptor import Runtime
from catenc.testing.check import compare
from catenc.testing.coverage import name_matches

# The op types item 3 of the issue names ("the node tests whose op is in the list above"): the
# elementwise and activation ops, linear algebra, convolution and pooling, normalisations,
# reductions, shape ops, comparisons and logic, attention and quantisation.
ISSUE_OPS: frozenset[str] = frozenset(
    {
        # elementwise arithmetic and math
        *("Abs", "Acos", "Acosh", "Add", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Div"),
        *("Exp", "Floor", "IsInf", "IsNaN", "Log", "Max", "Mean", "Min", "Mod", "Mul", "Neg", "Pow"),
        *("Reciprocal", "Round", "Sign", "Sin", "Sinh", "Sqrt", "Sub", "Sum", "Tan", "Tanh", "Erf"),
        *("BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor"),
        # activations
        *("Celu", "Clip", "Elu", "Gelu", "HardSigmoid", "HardSwish", "LeakyRelu", "Mish", "PRelu", "Relu"),
        *("Selu", "Shrink", "Sigmoid", "Softplus", "Softsign", "ThresholdedRelu"),
        # linear algebra, convolution, pooling
        *("MatMul", "Gemm", "Einsum", "Conv", "ConvTranspose"),
        *("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"),
        # normalisation, softmax, attention
        *("BatchNormalization", "LayerNormalization", "GroupNormalization", "Softmax", "LogSoftmax", "Attention"),
        # reductions
        *("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin"),
        *("ReduceProd", "ReduceSum", "ReduceSumSquare"),
        # shapes and data movement
        *("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice", "Gather"),
        *("Expand", "Tile", "Pad", "Where", "Cast"),
        # comparisons and logic
        *("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Not", "Xor"),
        # quantisation
        *("QuantizeLinear", "DequantizeLinear", "QLinearMatMul"),
    }
)

STATUSES = ("pass", "fail", "error", "unsupported")
BATCH_SIZE = 48  # entries per library: one compiler call each
RUN_TIMEOUT = 60.0  # seconds for a batch's tests to run (generated code that never ends is an error)
BF16_RTOL = 2**-6  # two bf16 ulps: the least rtol of a bf16 output, as onnx's own backend runner has it
EXPANDED = re.compile(r"_expanded(_ver\d+)?$")
NODE_ERROR = re.compile(r"node '.*' \(([\w.]+), opset \d+\): (.*)$")  # the importer's diagnostics
COMPILE_TIME = re.compile(  # a value the importer needs when it compiles: an input of a node, by its index
    r"node '(.*)' \(([\w.]+), opset \d+\): .*\(input (\d+)\) must be known when the model is compiled"
)
INPUT_TYPE = re.compile(r"graph input '.*': type (.+) is not supported")


@dataclass(frozen=True)
class NodeTest:
    """One backend node test: its model, the inputs of its first data set and the outputs expected."""

    name: str
    op: str
    model: Any  # onnx.ModelProto
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]
    rtol: float
    atol: float
    frozen: tuple[str, ...] = ()  # inputs made constants with the test's values (freeze_inputs)


@dataclass(frozen=True)
class Result:
    name: str
    op: str
    status: str  # one of STATUSES
    max_rel_error: float | None = None
    detail: str = ""
    blockers: tuple[str, ...] = ()  # the op types an unsupported test's import named
    frozen: tuple[str, ...] = ()  # the test's inputs that were constants of its model

    @property
    def in_issue_list(self) -> bool:
        return self.op in ISSUE_OPS


@dataclass(frozen=True)
class NodeReport:
    runtime: Runtime
    config: dict[str, str]
    toolchain: str
    onnx_version: str
    source: str  # where the tests came from
    results: tuple[Result, ...]
    freeze: bool = False  # inputs needed at compile time were made constants (freeze_inputs)

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        for result in self.results:
            counts[result.status] += 1
        return counts

    def issue_counts(self) -> tuple[int, int]:
        """(passed, total) of the tests whose op is in ISSUE_OPS."""
        listed = [r for r in self.results if r.in_issue_list]
        return sum(r.status == "pass" for r in listed), len(listed)

    def frozen_count(self) -> int:
        return sum(bool(r.frozen) for r in self.results)

    @property
    def regressed(self) -> bool:
        counts = self.counts()
        return bool(counts["fail"] or counts["error"])


@dataclass(frozen=True)
class Planned:
    """A test imported and planned: its entry and the file it came from."""

    test: NodeTest
    plan: EntryPlan
    root: CompositeFile
    library: Library


# ---- collecting the tests ----------------------------------------------------------------------


def collect_tests(node_dir: str | None = None, pattern: str | None = None) -> list[NodeTest]:
    """The tests whose name matches `pattern` (globs or substrings, separated by commas), by name:
    from the onnx package's generators, or from the data folders under `node_dir`."""
    tests = _from_folders(Path(node_dir), pattern) if node_dir else _from_generators(pattern)
    if not tests:
        where = f" in {node_dir}" if node_dir else ""
        raise CatencError(f"no ONNX node test matches '{pattern}'{where}" if pattern else f"no ONNX node test{where}")
    return sorted(tests, key=lambda t: t.name)


def _from_generators(pattern: str | None) -> list[NodeTest]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # the generators overflow casts on purpose
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    single = {c.name: c.model.graph.node[0].op_type for c in cases if len(c.model.graph.node) == 1}
    tests = []
    for case in cases:
        if not name_matches(case.name, pattern) or not case.data_sets:
            continue
        inputs, outputs = case.data_sets[0]
        op = test_op(case.name, case.model, single)
        tests.append(
            NodeTest(case.name, op, case.model, tuple(inputs), tuple(outputs), float(case.rtol), float(case.atol))
        )
    return tests


def _from_folders(root: Path, pattern: str | None) -> list[NodeTest]:
    import onnx

    if not root.is_dir():
        raise CatencError(f"--node-dir {root}: no such directory")
    tests = []
    folders = [p for p in sorted(root.iterdir()) if (p / "model.onnx").is_file()]
    single = {}
    for folder in folders:
        if not name_matches(folder.name, pattern) and not name_matches(EXPANDED.sub("", folder.name), pattern):
            continue
        try:
            model = onnx.load(str(folder / "model.onnx"))
        except Exception as err:  # onnx raises its own errors and protobuf's
            raise CatencError(f"{folder / 'model.onnx'}: cannot read the model: {err}") from None
        if len(model.graph.node) == 1:
            single[folder.name] = model.graph.node[0].op_type
        if name_matches(folder.name, pattern):
            tests.append((folder, model))
    return [
        NodeTest(folder.name, test_op(folder.name, model, single), model, *_data_set(folder, model), 1e-3, 1e-7)
        for folder, model in tests
    ]


def _data_set(folder: Path, model) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The inputs and expected outputs of a folder's first data set (test_data_set_0)."""
    data = folder / "test_data_set_0"
    used_inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    inputs = tuple(_read_value(data / f"input_{n}.pb", v.type) for n, v in enumerate(used_inputs))
    outputs = tuple(_read_value(data / f"output_{n}.pb", v.type) for n, v in enumerate(model.graph.output))
    return inputs, outputs


def _read_value(path: Path, value_type) -> Any:
    """A tensor, sequence or optional protobuf as onnx's backend runner reads it (None if absent)."""
    import onnx
    from onnx import numpy_helper

    if not path.is_file():
        return None
    kind = value_type.WhichOneof("value")
    proto = {"sequence_type": onnx.SequenceProto, "optional_type": onnx.OptionalProto}.get(kind, onnx.TensorProto)()
    proto.ParseFromString(path.read_bytes())
    if isinstance(proto, onnx.TensorProto):
        return numpy_helper.to_array(proto)
    return proto  # a sequence or optional: no catenc entry takes one


def test_op(name: str, model, single: dict[str, str]) -> str:
    """The op type a test is about: its node's, or for an `_expanded` test (the function body of
    an op), the op of the test it expands."""
    base = EXPANDED.sub("", name)
    if base in single:
        return single[base]
    if len(model.graph.node) == 1:
        return model.graph.node[0].op_type
    return _op_named_in(name) or (model.graph.node[0].op_type if model.graph.node else "")


def _op_named_in(name: str) -> str:
    """The op whose snake_case spelling starts the test's name, the longest such (test_reduce_sum_...)."""
    from onnx import defs

    best = ""
    for schema in defs.get_all_schemas():
        snake = _snake(schema.name)
        if name[len("test_") :].startswith(snake) and len(snake) > len(_snake(best)):
            best = schema.name
    return best


def _snake(op: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op).lower()


# ---- importing and planning one test -----------------------------------------------------------


def _default_importer() -> Callable[..., Any]:
    from catenc.onnx import importer

    return importer.import_model


def plan_test(
    test: NodeTest, options: Options, scratch: Path, import_model: Callable[..., Any], freeze: bool = False
) -> Planned | Result:
    """Import and plan one test; a Result (unsupported, error) when that fails. With `freeze`, an
    input the importer needs at compile time becomes a constant of the model."""
    display = f"{test.name}/model.onnx"
    try:
        model_path = scratch / f"{test.name}.onnx"
        model_path.write_bytes(test.model.SerializeToString())
        imported = import_model(str(model_path), display, test.name)
    except CatencError as err:
        frozen = freeze_inputs(test, err) if freeze else None
        if frozen is not None:
            return plan_test(frozen, options, scratch, import_model, freeze)
        return _import_failure(test, err)
    except Exception as err:
        return _result(test, "error", detail=f"import: internal error: {_exception_line(err)}")
    try:
        text_path = scratch / f"{test.name}.toml"
        text_path.write_text(imported.text)
        root = _composite_file(imported, text_path)
        library = Library(root, search_dirs(options.include_dirs))
        plan = plan_entry(library.local[imported.name], library, options)
    except CatencError as err:
        return _result(test, "error", detail=f"compile: {_first_line(str(err))}")
    except Exception as err:
        return _result(test, "error", detail=f"compile: internal error: {_exception_line(err)}")
    return Planned(test, plan, root, library)


def _composite_file(imported, text_path: Path) -> CompositeFile:
    """The imported composite file, its constants' values given in memory."""
    if not imported.constants:
        return load_composite_file(str(text_path), str(text_path))
    from catenc.frontend.composites import composite_file_from_text

    return composite_file_from_text(imported.text, str(text_path), imported.constants)


def freeze_inputs(test: NodeTest, err: CatencError) -> NodeTest | None:
    """The test with each graph input the import's diagnostics say must be known at compile time
    (a node's axes, shape, pads...) made a constant of its model with the test's value, as an
    exported model holds them (Resize's scales too, which are floats); None when no such input is named."""
    from onnx import numpy_helper

    graph = test.model.graph
    inputs = [v.name for v in graph.input if v.name not in {t.name for t in graph.initializer}]
    names: list[str] = []
    for message in [err.message, *(m.message for m in err.more)]:
        match = COMPILE_TIME.search(_first_line(message))
        if match is None:
            continue
        node, op, index = match.group(1), match.group(2), int(match.group(3))
        # the node by its name, or (the importer names unnamed nodes) every node of its op type
        nodes = [n for n in graph.node if n.name == node] or [n for n in graph.node if n.op_type == op.split(".")[-1]]
        for name in [n.input[index] for n in nodes if index < len(n.input)]:
            position = inputs.index(name) if name in inputs else len(test.inputs)
            value = test.inputs[position] if position < len(test.inputs) else None
            if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "biuf" and name not in names:
                names.append(name)
    if not names:
        return None
    model = type(test.model)()
    model.CopyFrom(test.model)
    kept = [v for v in model.graph.input if v.name not in names]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(numpy_helper.from_array(np.asarray(test.inputs[inputs.index(n)]), n) for n in names)
    remaining = tuple(v for n, v in zip(inputs, test.inputs) if n not in names)
    return replace(test, model=model, inputs=remaining, frozen=test.frozen + tuple(names))


def _result(
    test: NodeTest, status: str, max_rel_error: float | None = None, detail: str = "", blockers: tuple[str, ...] = ()
) -> Result:
    return Result(test.name, test.op, status, max_rel_error, detail, blockers, test.frozen)


def _import_failure(test: NodeTest, err: CatencError) -> Result:
    """unsupported: the importer declined the model, with a diagnostic (an operator, an attribute,
    an element type, a value it needs at compile time); what it named blocks the test."""
    found = [_blocker(test, _first_line(m)) for m in [err.message, *(m.message for m in err.more)]]
    blockers = tuple(dict.fromkeys(op for op, _ in found))
    detail = "; ".join(dict.fromkeys(text for _, text in found))
    return _result(test, "unsupported", detail=detail, blockers=blockers)


def _blocker(test: NodeTest, message: str) -> tuple[str, str]:
    """(what blocks, the diagnostic) of one import diagnostic: the node's op type (and the
    diagnostic from it on), `input type T` for a graph input of an element type catenc lacks, else
    the test's op."""
    node = NODE_ERROR.search(message)
    if node:
        return node.group(1), f"{node.group(1)}: {node.group(2)}"
    typed = INPUT_TYPE.search(message)
    if typed:
        return f"input type {typed.group(1)}", message
    return test.op, message


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _exception_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {_first_line(str(err))}"


# ---- building batches --------------------------------------------------------------------------


def build_batch(
    directory: Path, planned: list[Planned], options: Options
) -> tuple[list[tuple[Path, list[Planned]]], dict[str, str]]:
    """Build the entries into one library; when it does not build, split the batch in halves
    until each failing entry is alone. Returns (library directory, its tests) pairs and the
    errors of the entries that do not build, by test name."""
    first = planned[0]
    directory.mkdir(parents=True)
    try:
        build(
            FilePlan(first.root, first.library, tuple(p.plan for p in planned)),
            options,
            BuildRequest(str(directory / "batch.toml"), str(directory), ("c", "h", "manifest", "so")),
        )
        return [(directory, planned)], {}
    except (InternalError, CatencError) as err:
        if len(planned) == 1:
            return [], {first.test.name: f"build: {_first_line(str(err))}"}
    except Exception as err:
        if len(planned) == 1:
            return [], {first.test.name: f"build: internal error: {_exception_line(err)}"}
    half = len(planned) // 2
    built, errors = build_batch(directory / "a", planned[:half], options)
    more, more_errors = build_batch(directory / "b", planned[half:], options)
    return built + more, {**errors, **more_errors}


# ---- running -----------------------------------------------------------------------------------


def run_built(directory: Path, planned: list[Planned]) -> list[Result]:
    """Run a library's tests in a forked child; when it dies or hangs, each test alone, so the
    crash is its test's error."""
    results = _in_child(directory, planned)
    if results is not None:
        return results
    if len(planned) == 1:
        test = planned[0].test
        return [_result(test, "error", detail="run: the entry crashed or did not finish")]
    return [result for one in planned for result in run_built(directory, [one])]


def _in_child(directory: Path, planned: list[Planned]) -> list[Result] | None:
    """The tests' results from a forked child, or None when it died or ran out of time."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child_main, args=(directory, planned, send), daemon=True)
    child.start()
    send.close()
    try:
        if receive.poll(RUN_TIMEOUT):
            return pickle.loads(receive.recv_bytes())
        return None
    except (EOFError, OSError):
        return None
    finally:
        receive.close()
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
        child.join()


def _child_main(directory: Path, planned: list[Planned], send) -> None:
    faulthandler.disable()  # a crash here is a test's result, reported by the parent
    results = run_tests(directory, planned)
    send.send_bytes(pickle.dumps(results))
    send.close()


def run_tests(directory: Path, planned: list[Planned]) -> list[Result]:
    """Load the library and run each test's entry on its inputs (in this process)."""
    try:
        library = load(directory / "batch.manifest.json")
    except Exception as err:
        return [_result(p.test, "error", detail=f"load: {_exception_line(err)}") for p in planned]
    return [check_test(p.test, library[p.plan.name]) for p in planned]


def check_test(test: NodeTest, entry) -> Result:
    """Call the entry on the test's inputs and compare each output with the expected one: the
    same dtype and shape, values within the test's rtol and atol (NaN equal to NaN)."""
    try:
        if len(entry.inputs) != len(test.inputs):
            raise _Mismatch(f"the entry takes {len(entry.inputs)} inputs, the test gives {len(test.inputs)}")
        arrays = [_input_array(spec, value) for spec, value in zip(entry.inputs, test.inputs)]
        got = entry(*arrays)
        got = got if isinstance(got, tuple) else (got,)
        if len(got) != len(test.outputs):
            raise _Mismatch(f"the entry returns {len(got)} outputs, the test expects {len(test.outputs)}")
        worst = 0.0
        for spec, value, want in zip(entry.outputs, got, test.outputs):
            rel, problem = _compare_output(spec.name, spec.dtype, value, want, test)
            if problem:
                return _result(test, "fail", rel, problem)
            worst = max(worst, rel)
        return _result(test, "pass", worst)
    except _Mismatch as err:
        return _result(test, "error", detail=f"run: {err}")
    except Exception as err:
        return _result(test, "error", detail=f"run: {_exception_line(err)}")


class _Mismatch(Exception):
    """The entry's signature does not fit the test's data."""


def _numpy_name(dtype: DType) -> str:
    """The numpy dtype of this dtype's values in an ONNX test's tensors (ml_dtypes' for bf16)."""
    return "bfloat16" if dtype.name == "bf16" else dtype.numpy.name


def _input_array(spec, value) -> np.ndarray:
    if not isinstance(value, (np.ndarray, np.generic)):
        value = _tensor(value)
    array = np.asarray(value)
    if array.dtype.name != _numpy_name(spec.dtype):
        raise _Mismatch(f"input '{spec.name}' is {spec.dtype.name}, the test gives {array.dtype.name}")
    if spec.dtype.name == "bf16":
        return array.astype(np.float32)  # the loader rounds float values to bf16 bits
    return array


def _tensor(value) -> np.ndarray:
    """A TensorProto as numpy; anything else (a sequence, an optional, None) cannot be an input."""
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    raise _Mismatch(f"an input is a {type(value).__name__}, not a tensor")


def _compare_output(name: str, dtype: DType, got: np.ndarray, want, test: NodeTest) -> tuple[float, str]:
    """(max relative error, "" or what is wrong) of one output: onnx's backend runner's check."""
    want = np.asarray(want if isinstance(want, (np.ndarray, np.generic)) else _tensor(want))
    if want.dtype.name != _numpy_name(dtype):
        return 0.0, f"output '{name}' is {dtype.name}, expected {want.dtype.name}"
    if got.shape != want.shape:
        return 0.0, f"output '{name}' has shape {list(got.shape)}, expected {list(want.shape)}"
    expected = want.astype(np.float32) if dtype.name == "bf16" else want
    rtol = max(test.rtol, BF16_RTOL) if dtype.name == "bf16" else test.rtol
    max_abs, max_rel, _, ok = compare(from_storage(got, dtype), expected, dtype, rtol, test.atol)
    if ok:
        return max_rel, ""
    measured = f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}"
    return max_rel, f"output '{name}': {measured} (rtol {rtol:g}, atol {test.atol:g})"


# ---- the suite ---------------------------------------------------------------------------------


def run_node_tests(
    runtime: Runtime,
    config: dict[str, str],
    node_dir: str | None = None,
    pattern: str | None = None,
    progress: Callable[[int, int, str], None] = lambda done, total, line: None,
    import_model: Callable[..., Any] | None = None,
    batch_size: int = BATCH_SIZE,
    freeze: bool = False,
) -> NodeReport:
    """Every selected node test through the runtime; `import_model` replaces the importer (tests);
    `freeze`: see `freeze_inputs`."""
    try:
        import onnx
    except ImportError:
        raise CatencError("--suite onnx needs the onnx package: pip install 'catenc[onnx]'") from None
    if not runtime.runnable(config):
        raise CatencError(f"--suite onnx runs the tests on this machine; runtime '{runtime.name}' cannot run here")
    tests = collect_tests(node_dir, pattern)
    importer = import_model or _default_importer()
    options = Options(runtime, config, opt="2")
    results: dict[str, Result] = {}
    batches = list(_batches(tests, batch_size))
    with tempfile.TemporaryDirectory(prefix="catenc-onnx-") as scratch:
        with ThreadPoolExecutor(max_workers=2) as pool:  # builds beside the planning of the next batches
            pending = []
            for number, batch in enumerate(batches, 1):
                planned = []
                for test in batch:
                    outcome = plan_test(test, options, Path(scratch), importer, freeze)
                    if isinstance(outcome, Result):
                        results[test.name] = outcome
                    else:
                        planned.append(outcome)
                directory = Path(scratch) / f"batch{number:03}"
                pending.append(pool.submit(build_batch, directory, planned, options) if planned else None)
                progress(number, 2 * len(batches), f"planned {batch[0].name} .. {batch[-1].name}")
            built = [future.result() if future is not None else ([], {}) for future in pending]
        # the pool's threads are gone: each batch runs in a forked child of this one thread
        for number, (batch, (libraries, errors)) in enumerate(zip(batches, built), len(batches) + 1):
            for test in batch:
                if test.name in errors:
                    results[test.name] = _result(test, "error", detail=errors[test.name])
            for directory, planned in libraries:
                for result in run_built(directory, planned):
                    results[result.name] = result
            progress(
                number, 2 * len(batches), f"ran {batch[0].name} .. {batch[-1].name}: {_counts_text(batch, results)}"
            )
    ordered = tuple(results[t.name] for t in tests)
    source = node_dir or f"onnx {onnx.__version__} generators (onnx.backend.test.case.node)"
    return NodeReport(runtime, config, runtime.toolchain_version(config), onnx.__version__, source, ordered, freeze)


def _batches(tests: list[NodeTest], size: int) -> Iterator[list[NodeTest]]:
    for start in range(0, len(tests), size):
        yield tests[start : start + size]


def _counts_text(batch: list[NodeTest], results: dict[str, Result]) -> str:
    counts = Counter(results[t.name].status for t in batch if t.name in results)
    return ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])


# ---- reports -----------------------------------------------------------------------------------


def summary_line(report: NodeReport) -> str:
    c = report.counts()
    passed, listed = report.issue_counts()
    share = f" ({100 * passed / listed:.0f}%)" if listed else ""
    return (
        f"{c['pass']} passed, {c['fail']} failed, {c['error']} error, {c['unsupported']} unsupported "
        f"of {len(report.results)} node tests; of the tests whose op is in the issue's list: {passed}/{listed} pass"
        + share
        + (f"; {report.frozen_count()} with inputs made constants" if report.frozen_count() else "")
    )


def blocking_ops(report: NodeReport) -> list[tuple[str, int, int, int]]:
    """(op, failing, error, unsupported tests) of each op that keeps a test from passing, most
    tests first: the test's op for fail and error, the ops its import named for unsupported."""
    counts: dict[str, Counter] = {}
    for result in report.results:
        if result.status == "pass":
            continue
        for op in result.blockers if result.status == "unsupported" and result.blockers else (result.op,):
            counts.setdefault(op, Counter())[result.status] += 1
    rows = [(op, c["fail"], c["error"], c["unsupported"]) for op, c in counts.items()]
    return sorted(rows, key=lambda row: (-sum(row[1:]), row[0]))


def _result_text(result: Result) -> str:
    if result.status in ("pass", "fail") and result.max_rel_error is not None:
        return f"{result.status} ({result.max_rel_error:.1e})"
    return result.status


def _detail(result: Result) -> str:
    """The row's detail, after the inputs its model was given as constants."""
    frozen = f"constant {', '.join(result.frozen)}" if result.frozen else ""
    return "; ".join(filter(None, (frozen, result.detail)))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: NodeReport) -> str:
    config = ", ".join(f"{k}={v}" for k, v in sorted(report.config.items()) if v) or "defaults"
    lines = [
        f"# ONNX node tests: runtime `{report.runtime.name}`",
        "",
        f"- runtime: `{report.runtime.name}` ({report.runtime.language}), config: {config}",
        f"- toolchain: {report.toolchain}",
        f"- catenc: {__version__}, onnx: {report.onnx_version}",
        f"- tests: {report.source}",
        *(
            [
                "- an input the importer needs at compile time (axes, shape, pads, scales...) is made a constant "
                "with the test's value (--freeze-shape-inputs): such rows say `constant NAME`"
            ]
            if report.freeze
            else []
        ),
        "",
        f"**{summary_line(report)}**",
        "",
        "Results: `pass (max relative error)`, `fail (max relative error)` (wrong values, beyond the test's "
        "rtol and atol, or another dtype or shape), `error` (import, compile, build or run failure), "
        "`unsupported` (the importer declines an operator, attribute, element type or a value it needs at compile "
        "time: its diagnostic). An `_expanded` test runs "
        "the function body of its op; its op column names the op it expands.",
        "",
        "## Ops that keep tests from passing",
        "",
        "| op | fail | error | unsupported | in the issue's list |",
        "|---|---|---|---|---|",
    ]
    for op, fail, error, unsupported in blocking_ops(report):
        lines.append(f"| {op} | {fail} | {error} | {unsupported} | {'yes' if op in ISSUE_OPS else ''} |")
    lines += ["", "## Tests", "", "| test | op | result | detail |", "|---|---|---|---|"]
    for r in report.results:
        lines.append(f"| {r.name} | {r.op} | {_result_text(r)} | {_cell(_detail(r))} |")
    lines.append("")
    return "\n".join(lines)


def render_json(report: NodeReport) -> str:
    passed, listed = report.issue_counts()
    data = {
        "schema": "catenc.onnx-node-tests/1",
        "catenc_version": __version__,
        "onnx_version": report.onnx_version,
        "source": report.source,
        "freeze_shape_inputs": report.freeze,
        "runtime": {"name": report.runtime.name, "config": report.config, "toolchain": report.toolchain},
        "summary": {**report.counts(), "issue_ops": {"passed": passed, "total": listed}},
        "issue_ops": sorted(ISSUE_OPS),
        "tests": [
            {
                "name": r.name,
                "op": r.op,
                "in_issue_list": r.in_issue_list,
                "status": r.status,
                "max_rel_error": r.max_rel_error,
                "detail": r.detail,
                "blockers": list(r.blockers),
                "frozen": list(r.frozen),
            }
            for r in report.results
        ],
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
