"""What the callgrind benchmarks share: a C host program built against this tree's libetmetal,
and the instructions callgrind counts over one run of it (all threads).

    binary, library = build_host(HOST_SOURCE, folder)
    total, profile = instructions(binary, [str(n)], folder, env)
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_host(source_text, folder):
    """Compiles `source_text` (C) in `folder` against libetmetal; exits when valgrind or gcc is
    missing. Returns the binary's path and the library's."""
    for tool in ("valgrind", "gcc"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is needed")
    sys.path.insert(0, str(ROOT))
    import etmetal_py

    library = Path(etmetal_py.library_path())
    source = Path(folder) / "host.c"
    source.write_text(source_text)
    binary = Path(folder) / "host"
    subprocess.run(["gcc", "-O2", f"-I{ROOT / 'native' / 'include'}", str(source), "-o", str(binary),
                    str(library), f"-Wl,-rpath,{library.parent}"], check=True)
    return binary, library


def instructions(binary, arguments, folder, env):
    """Instructions of one run of `binary arguments...` under callgrind, and the profile's path."""
    out = Path(folder) / ("callgrind." + "_".join(arguments))
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(binary), *arguments],
                   env=env, check=True, capture_output=True, text=True)
    return int(re.search(r"^summary:\s+(\d+)", out.read_text(), re.M).group(1)), out
