"""native/source_folders.py, which lists the build's .cpp files and public headers for meson
(no central list to edit when an op is added) and stops a build configured before a file was
added or removed."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "native" / "source_folders.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_lists_a_folders_files_and_checks_them_against_the_configured_list(tmp_path):
    for name in ("b.cpp", "a.cpp", "notes.md", ".hidden.cpp"):
        (tmp_path / "abi" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "abi" / name).write_text("")
    listed = run("--base", str(tmp_path), "--suffix", ".cpp", "abi")
    assert listed.returncode == 0 and listed.stdout.split() == ["abi/a.cpp", "abi/b.cpp"]

    stamp, depfile = tmp_path / "check.stamp", tmp_path / "check.d"
    check = ["--base", str(tmp_path), "--check", "--stamp", str(stamp), "--depfile", str(depfile),
             "--suffix", ".cpp", "abi", "--"]
    assert run(*check, "abi/a.cpp", "abi/b.cpp").returncode == 0
    assert depfile.read_text() == f"{stamp}: {tmp_path / 'abi'}\n"  # the folder: reruns on a new file

    (tmp_path / "abi" / "c.cpp").write_text("")
    stale = run(*check, "abi/a.cpp", "abi/b.cpp", "abi/gone.cpp")
    assert stale.returncode == 1
    assert "added abi/c.cpp; removed abi/gone.cpp" in stale.stderr
    assert "meson setup --reconfigure" in stale.stderr
