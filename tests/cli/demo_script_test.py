#!/usr/bin/env python3
"""scripts/demo.sh builds only what it runs (issue 22: it built all ~350 targets, the test suite
and every CUDA kernel, before its first line of training), while scripts/test.sh still builds
everything; scripts/build.sh passes --target through to CMake (checked with a stand-in cmake on
PATH, so nothing is built); and the README says how long each command takes. Standard library
only. Prints "N passed, M failed"; exits non-zero when anything failed.
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from checks import Checks  # noqa: E402  (tests/common, shared by the Python tests)

CHECKS = Checks()
check = CHECKS.check


def build_calls(script):
    """The argument lists of each `bash scripts/build.sh ...` line of a script."""
    calls = []
    for line in (ROOT / script).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "scripts/build.sh" in line:
            words = shlex.split(line)
            calls.append(words[words.index("scripts/build.sh") + 1:])
    return calls


def targets(args):
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--target"]


demo = (ROOT / "scripts/demo.sh").read_text()
calls = build_calls("scripts/demo.sh")
check("demo.sh builds once", len(calls) == 1, str(calls))
built = set(t for c in calls for t in targets(c))
check("demo.sh builds only named targets", all(targets(c) for c in calls), str(calls))
# Every binary the demo runs (build/bin/NAME) is a target it builds.
used = set(re.findall(r"build/bin/([A-Za-z0-9_]+)", demo))
check("demo.sh runs binaries", bool(used))
check("demo.sh builds every binary it runs", used <= built, f"runs {used}, builds {built}")

# The demo runs on CPUs: no CUDA kernels; test.sh turns the CUDA backend back on (a cached
# KILN_CUDA=OFF from the demo would otherwise leave it out of the tests).
check("demo.sh builds without the CUDA backend", all("-DKILN_CUDA=OFF" in c for c in calls),
      str(calls))
test_calls = build_calls("scripts/test.sh")
check("test.sh builds everything", len(test_calls) == 1 and not targets(test_calls[0]),
      str(test_calls))
check("test.sh builds the CUDA backend where it can",
      bool(test_calls) and "-DKILN_CUDA=AUTO" in test_calls[0], str(test_calls))

# build.sh with a stand-in cmake: the configure step gets the extra arguments, the build step the
# targets, and without targets it builds all.
with tempfile.TemporaryDirectory() as tmp:
    fake = Path(tmp) / "cmake"
    log = Path(tmp) / "calls"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp}:{os.environ['PATH']}")
    for args, want_build in ((["--target", "kiln", "-DX=1"], "--target kiln"), (["-DX=1"], None)):
        log.write_text("")
        r = subprocess.run(["bash", str(ROOT / "scripts/build.sh"), *args], env=env,
                           capture_output=True, text=True)
        lines = log.read_text().splitlines()
        check(f"build.sh {args} runs", r.returncode == 0, r.stderr[-500:])
        if r.returncode != 0 or len(lines) != 2:
            check(f"build.sh {args} configures and builds", False, str(lines))
            continue
        configure, build = lines
        check(f"build.sh {args}: configure gets the CMake arguments",
              configure.endswith("-DX=1") and "--target" not in configure, configure)
        if want_build:
            check(f"build.sh {args}: builds the target", build.endswith(want_build), build)
        else:
            check(f"build.sh {args}: builds everything", "--target" not in build, build)

# The README says how long each command takes on a fresh 2-core machine.
readme = (ROOT / "README.md").read_text()
for script in ("scripts/demo.sh", "scripts/test.sh"):
    said = [l for l in readme.splitlines() if script in l and re.search(r"\d+ min", l)]
    check(f"README gives {script}'s time in minutes", bool(said))

sys.exit(CHECKS.summary())
