"""One configuration policy: every ETMETAL_* variable goes through one parser; a value the
variable does not accept is an error at the library's first use, naming the variable and the
values it accepts; `etmetal info` prints the settings in effect."""

import os
import subprocess
import sys

import pytest

PROBE = """
import etmetal_py
from etmetal_py import ffi, lib
code = lib.aoti_torch_mps_malloc(ffi.new("void**"), 16)
print(code, etmetal_py.last_error())
"""


def run(code, **environment):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETMETAL_")
           or k == "ETMETAL_LIBRARY"}
    env.update(environment)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)


INVALID = [
    ("ETMETAL_LOG", "verbose", "one of error, warn, info or debug"),
    ("ETMETAL_DEVICE", "gpu", "one of metal or cpu"),
    ("ETMETAL_MAX_OPS_PER_BUFFER", "many", "an integer from 1 to"),
    ("ETMETAL_MAX_MB_PER_BUFFER", "0", "an integer from 1 to"),
    ("ETMETAL_POOL_MB", "-1", "an integer from 0 to"),
    ("ETMETAL_CPU_THREADS", "0", "an integer from 1 to 1024"),
    ("ETMETAL_CPU_EXECUTION", "fast", "one of loop, fibers or regions"),
    ("ETMETAL_CPU_OVERLAP", "on", "one of 0 or 1"),
    ("ETMETAL_FAST_MATH", "yes", "one of 0 or 1"),
    ("ETMETAL_FALLBACKS", "graph", "one of mpsgraph or msl"),
    ("ETMETAL_OP_SHAPES", "metal", "one of gpu or cpu"),
]

# A runtime that failed to start retries at the next call, so one process tries every value.
EACH_INVALID = """
import json, os, sys
import etmetal_py
from etmetal_py import ffi, lib
results = []
for name, value in json.loads(sys.argv[1]):
    os.environ[name] = value
    code = lib.aoti_torch_mps_malloc(ffi.new("void**"), 16)
    results.append([code, etmetal_py.last_error()])
    del os.environ[name]
print(json.dumps(results))
"""


def test_an_invalid_value_is_an_error_naming_the_variable():
    import json

    env = {k: v for k, v in os.environ.items() if not k.startswith("ETMETAL_")
           or k == "ETMETAL_LIBRARY"}
    result = subprocess.run(
        [sys.executable, "-c", EACH_INVALID, json.dumps([[n, v] for n, v, _ in INVALID])],
        capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    for (name, value, accepted), (code, message) in zip(INVALID, json.loads(result.stdout)):
        assert code == 1, (name, message)
        assert f"{name} must be {accepted}" in message and f"not '{value}'" in message, message


def test_valid_values_are_used_and_info_prints_them():
    result = run(PROBE, ETMETAL_MAX_OPS_PER_BUFFER="7", ETMETAL_LOG="error")
    assert result.stdout.startswith("0 "), result.stdout + result.stderr
    # The CPU device runs no graphs: ETMETAL_FALLBACKS=mpsgraph (the default) is accepted
    # there and its fallbacks stay MSL kernels (every op test runs with it).
    result = run("from etmetal_py.cli import main; main(['info'])",
                 ETMETAL_MAX_OPS_PER_BUFFER="7", ETMETAL_CPU_EXECUTION="loop",
                 ETMETAL_FALLBACKS="mpsgraph")
    assert result.returncode == 0, result.stderr
    assert "every 7 commands" in result.stdout
    assert "ETMETAL_CPU_EXECUTION=loop" in result.stdout
    assert "ETMETAL_FALLBACKS=mpsgraph" in result.stdout
    assert "ETMETAL_POOL_MB unset (default:" in result.stdout

