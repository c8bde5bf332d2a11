"""A plain C host: the public headers compile as C11 and C++17, and a program linked against
libetmetal runs without Python."""

import shutil
import subprocess
from pathlib import Path

import pytest

import etmetal_py

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "native" / "include"

PROGRAM = r"""
#include <etmetal/etmetal.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  int64_t sizes[2] = {2, 3}, transposed[2] = {1, 2};
  AtenTensorHandle a, b;
  if (aoti_torch_empty_strided(2, sizes, NULL, aoti_torch_dtype_float32(),
                               aoti_torch_device_type_mps(), 0, &a)) return 1;
  if (aoti_torch_empty_strided(2, sizes, transposed, aoti_torch_dtype_float16(),
                               aoti_torch_device_type_mps(), 0, &b)) return 2;
  float* data;
  aoti_torch_get_data_ptr(a, (void**)&data);
  for (int i = 0; i < 6; ++i) data[i] = (float)i + 0.5f;
  if (aoti_torch_copy_(b, a, 0)) return 3;
  if (etmetal_synchronize(ETMETAL_SYNC_COMMIT_AND_WAIT)) return 4;
  uint16_t* half_bits;
  aoti_torch_get_data_ptr(b, (void**)&half_bits);
  /* b is column-major: element (1, 0) = 3.5 sits at index 1; 3.5 in binary16 is 0x4300. */
  if (half_bits[1] != 0x4300) return 5;
  if (aoti_torch_get_numel(NULL, NULL) != 1 || strstr(etmetal_last_error(), "null") == NULL) return 6;
  aoti_torch_delete_tensor_object(a);
  aoti_torch_delete_tensor_object(b);
  etmetal_allocator_stats_t stats;
  etmetal_allocator_stats(&stats);
  printf("%s %lld\n", etmetal_device_kind(), (long long)stats.live_bytes);
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_headers_compile_as_c_and_cpp(tmp_path):
    source = tmp_path / "headers.c"
    source.write_text("#include <etmetal/etmetal.h>\nint main(void) { return 0; }\n")
    for compiler, flags in (("gcc", ["-std=c11", "-pedantic"]), ("g++", ["-std=c++17", "-x", "c++"])):
        subprocess.run([compiler, *flags, "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}", "-c",
                        str(source), "-o", str(tmp_path / "headers.o")], check=True)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_c_program_links_and_runs(tmp_path):
    library = Path(etmetal_py.library_path())
    source = tmp_path / "host.c"
    source.write_text(PROGRAM)
    binary = tmp_path / "host"
    subprocess.run(["gcc", "-std=c11", f"-I{INCLUDE}", str(source), str(library),
                    f"-Wl,-rpath,{library.parent}", "-o", str(binary)], check=True)
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, (result.returncode, result.stderr)
    kind, live_bytes = result.stdout.split()
    assert kind in ("cpu", "metal") and live_bytes == "0"
