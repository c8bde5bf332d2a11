"""The region forms of the project's own kernels (shaders/*.metal) compile: one that does not is
dropped without a word (the kernel compiles twice and runs on fibers, one context switch per
barrier). Creating a library checks all its kernels' region forms in one syntax-only compile
(or builds its one kernel); ETMETAL_LOG=debug names those that fail
(tools/region_survey.py lists them, and the kernels declined by design)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import region_survey  # noqa: E402


@pytest.mark.parametrize("path", sorted(region_survey.SHADERS.glob("*.metal")), ids=lambda path: path.stem)
def test_region_forms_of_project_kernels_compile(msl, path, monkeypatch, capfd):
    monkeypatch.setenv("ETMETAL_LOG", "debug")
    source = region_survey.shader_source(path)
    msl(source)
    found = region_survey.parse_log(capfd.readouterr().err, source)
    assert not found["failed"], found["failed"]
