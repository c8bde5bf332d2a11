"""The CPU pipeline contract (cpu_pipeline.h) driven from C++ where the C ABI does not reach:
dynamic [[threadgroup(n)]] memory, the 32 KiB limit, argument-table checks, concurrent
dispatches from two threads."""

import os
import subprocess
from pathlib import Path

import pytest

from etmetal_testing import build_host_program, library_objects


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    # The CPU device's objects (all but the Device object, which needs the runtime) and the
    # settings table they read, as built into the library under test.
    objects = [path for path in library_objects("device_cpu_*.o", "*_device_cpu_*.o", "device_settings.cpp.o")
               if path.name != "device_cpu_cpu_device.cpp.o"]
    return build_host_program(Path(__file__).with_name("pipeline_driver.cpp"), objects,
                              tmp_path_factory.mktemp("pipeline") / "pipeline_driver")


def test_pipeline_contract(driver, tmp_path):
    env = dict(os.environ, ETMETAL_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run([str(driver)], capture_output=True, text=True, env=env, timeout=600)
    lines = result.stdout.splitlines()
    failed = [line for line in lines if " ok" not in line]
    assert not failed and result.returncode == 0, result.stdout + result.stderr
    names = {line.split()[0] for line in lines}
    assert names == {"dynamic_threadgroup_memory", "static_threadgroup_memory_length",
                     "threadgroup_memory_limit", "unbound_buffer", "reference_length",
                     "concurrent_dispatches"}
