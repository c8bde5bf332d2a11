"""Fixtures of the CPU device tests (helpers live in cpu_device_testing.py)."""

import pytest

from cpu_device_testing import ShaderLibrary, require_cpu_device


@pytest.fixture
def msl():
    """Compiles MSL source into a ShaderLibrary; libraries are deleted after the test."""
    require_cpu_device()
    made = []

    def compile_source(source):
        library = ShaderLibrary(source)
        made.append(library)
        return library

    yield compile_source
    for library in made:
        library.close()
