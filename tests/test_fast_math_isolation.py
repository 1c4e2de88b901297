"""-Ofast changes how the library computes, never the process that loads it.

Linking a shared library with -ffast-math brings crtfastmath.o, whose constructor sets
flush-to-zero for the whole process; catenc links -Ofast libraries without it. The check runs
in a subprocess so that a failure cannot leak into the other tests.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import compile_text
from toolchains import COMPILERS, require

SOURCE = """
[composite.scale]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = "y = x * 2.0"
"""

PROBE = """
import sys
import numpy as np
from catenc.loader import load
lib = load(sys.argv[1])
assert lib.scale(np.ones(3, np.float32)).tolist() == [2.0, 2.0, 2.0]
tiny = np.array([1e-40], dtype=np.float32)  # a subnormal: zero under flush-to-zero
print(float((tiny * np.float32(3.0))[0]))
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_ofast_library_leaves_subnormals_alone(tmp_path, compiler):
    require(compiler)
    lib = compile_text(tmp_path, SOURCE, name="fast", opt="fast", config={"CC": compiler})
    commands = lib.manifest["build"]["commands"]
    assert "-ffast-math" in commands[0] and "-ffast-math" not in commands[-1]
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(lib.manifest_path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == float(np.float32(1e-40) * np.float32(3.0)) != 0.0
