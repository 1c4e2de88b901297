"""Differential fuzzing: random well-typed composites (tests/fuzzing/programs.py) compiled
in-process at -O0 and -O2 (a third of the files also at -O3 with OMP=1, a fifth with one symbol
fixed by -D) must agree with catenc's reference interpreter and with each other, at several
symbol bindings (0 and 1 wherever a program allows them), on the same random inputs.

Hypothesis is derandomized, so the suite is deterministic: EXAMPLES examples of FILES files of
BATCH composites each, the files of an example checked in parallel in forked children
(tests/fuzzing/run.py). A CatencError rejection is counted, not failed
(test_generator_rejection_rate bounds the rate); any other exception, a crash or a mismatch
fails with the offending composites. For a longer search run `make fuzz MINUTES=10`; bugs found
that way are pinned down in test_fuzz_regressions.py.
"""

from __future__ import annotations

import itertools
import random

import pytest
from fuzzing.programs import RandomChooser, batch_toml, program_batches, random_program
from fuzzing.run import BASE_LEVELS, FAILURES, OMP_LEVEL, OPENCL_LEVEL, Job, choose_defines, run_jobs
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from catenc.diagnostics import CatencError
from catenc.driver import plan_file
from catenc.plan import Options
from catenc.runtime.descriptor import load_runtime

# 144 programs: each compile of a file costs its prelude and the toolchain's start again, so the
# programs go 12 to a file (the C toolchain is most of a file's time). The suite's share of the
# search; `make fuzz` runs it for as long as it is given.
EXAMPLES = 6  # hypothesis examples
FILES = 2  # composite files per example, checked in parallel
BATCH = 12  # composites per file
BINDINGS = 3  # symbol bindings per composite

_DIRS = itertools.count()


@settings(
    derandomize=True,
    database=None,
    max_examples=EXAMPLES,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: each step recompiles a file
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_generated_programs_agree_across_levels_and_with_the_reference(data, tmp_path_factory):
    jobs = []
    for f in range(FILES):
        programs = data.draw(program_batches(size=BATCH, prefix=f"f{f}_"), label=f"file {f}")
        # everything else is a function of the programs, so a failing example replays exactly
        chooser = RandomChooser(random.Random(batch_toml(programs)))
        defines = choose_defines(programs, chooser)
        bindings = [p.bindings(chooser, BINDINGS, defines) for p in programs]
        levels = BASE_LEVELS + ((OMP_LEVEL,) if chooser.chance(1 / 3) else ())
        levels += (OPENCL_LEVEL,) if chooser.chance(1 / 3) else ()
        workdir = tmp_path_factory.mktemp(f"fuzz{next(_DIRS)}")
        jobs.append(Job(programs, workdir, bindings, levels, seed=f, defines=defines))
    failures = []
    for _, outcomes in run_jobs(jobs, parallel=FILES):
        failures += [o for o in outcomes if o.status in FAILURES]
    assert not failures, "catenc disagrees with itself or its reference:\n\n" + "\n\n".join(
        o.report() for o in failures
    )


def test_generator_rejection_rate(tmp_path):
    """Generated programs are valid by construction: catenc's frontend and middle end accept
    nearly all of them (the few rejections are proofs its prover cannot make), and never fail
    with anything but a CatencError."""
    rt = load_runtime("clang")
    options = Options(rt, config=rt.validate_config({}), opt="2")
    rng = random.Random(0)
    total, rejected = 150, []
    for k in range(total):
        program = random_program(rng, f"r{k}")
        path = tmp_path / f"r{k}.toml"
        path.write_text(program.toml())
        try:
            plan_file(str(path), options)
        except CatencError as error:
            rejected.append(f"{error}\n{program.toml()}")
    assert len(rejected) <= total * 0.05, f"{len(rejected)} of {total} rejected:\n\n" + "\n\n".join(rejected)


@pytest.mark.parametrize("seed", range(3))
def test_generated_programs_are_deterministic(seed):
    first = random_program(random.Random(seed), "p").toml()
    again = random_program(random.Random(seed), "p").toml()
    assert first == again
