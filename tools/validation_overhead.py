"""How much slower kernels run under the sanitizer (ETMETAL_VALIDATE=1) on the CPU device.

    python3 tools/validation_overhead.py [--repeat 7] [--wall]
    python3 tools/validation_overhead.py --instructions [--calls 2]

Clean kernels of the sanitizer's tests (tests/cpu_device/validated_cases.py: elementwise
kernels, one of them a read-modify-write, one with Inductor's several buffers and scalars;
barrier kernels, one with a per-thread array across the barrier; a SIMD-group reduction) run in
two child processes, one without and one with validation (the flag is fixed per process); each
prints the median time per dispatch after a warm-up, and the ratio of the two medians is
reported per kernel. The children run kernels on one worker thread and time the process's CPU
time, so the ratio stays what the checks cost on a machine busy with other work (--wall:
wall-clock time, every worker).

--instructions counts instructions instead, with callgrind (valgrind), which a busy machine
does not disturb: a C host dispatches one kernel N times and waits after each, on one worker;
instructions per dispatch = (Ir(2N) - Ir(N)) / N, all threads counted, so process start and the
first (compiling) call cancel out. Kernels are compiled for x86-64-v3 (valgrind decodes no
AVX-512), 2^16 threads per dispatch (--threads).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES_FOLDER = ROOT / "tests" / "cpu_device"

# kernel: (arguments, threadgroup size); every dispatch covers the whole grid. An argument is
# a float32 array of one element per thread ("x": random values, "y": zeros) or a Python int.
CASES = {
    "scale": (("x", "y", 3), 256),
    "add_into": (("y", "x"), 256),
    "blend": (("x", "y", "y", 2, 3, 1 << 30), 256),
    "reverse_groups": (("x", "y"), 64),
    "local_array": (("x", "y"), 64),
    "group_sums": (("x", "y"), 256),
}

CHILD = r"""
import json, sys, time
import numpy as np
from etmetal_py.kernels import compile_library

sys.path.insert(0, sys.argv[2])
from validated_cases import SOURCE  # the sanitizer tests' kernels: one clean kernel per execution path

repeat, cases, threads = int(sys.argv[1]), json.loads(sys.argv[4]), int(sys.argv[5])
clock = time.perf_counter if sys.argv[3] == "wall" else time.process_time
arrays = {"x": np.random.default_rng(0).standard_normal(threads).astype(np.float32),
          "y": np.zeros(threads, np.float32)}
out = {}
with compile_library(SOURCE) as library:
    for name, (arguments, group) in cases.items():
        function = library.function(name)
        values = [arrays[a] if isinstance(a, str) else a for a in arguments]
        call = lambda: function(*values, threads=threads, group=group)
        call()
        times = []
        for _ in range(repeat):
            start = clock()
            call()
            times.append(clock() - start)
        out[name] = sorted(times)[len(times) // 2]
print(json.dumps(out))
"""

# host CALLS KERNEL THREADS GROUP ARGUMENT...: ARGUMENT is x or y (a float32 tensor of THREADS
# elements, random or zero) or an integer.
HOST = r"""
#include <etmetal/etmetal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* kSource = SOURCE_LITERAL;

int main(int argc, char** argv) {
  const long calls = atol(argv[1]);
  const uint64_t threads = strtoull(argv[3], NULL, 10), group = strtoull(argv[4], NULL, 10);
  AOTIMetalShaderLibraryHandle library;
  AOTIMetalKernelFunctionHandle kernel;
  if (aoti_torch_mps_create_shader_library(kSource, &library) ||
      aoti_torch_mps_get_kernel_function(library, argv[2], &kernel)) {
    fprintf(stderr, "%s\n", etmetal_last_error());
    return 1;
  }
  const int arguments = argc - 5;
  AtenTensorHandle tensors[8];
  const int64_t sizes[1] = {(int64_t)threads};
  unsigned seed = 1;
  for (int a = 0; a < arguments && a < 8; ++a) {
    const char* argument = argv[5 + a];
    if (strcmp(argument, "x") && strcmp(argument, "y")) continue;
    float* data;
    if (aoti_torch_empty_strided(1, sizes, NULL, aoti_torch_dtype_float32(), aoti_torch_device_type_mps(), 0,
                                 &tensors[a]) || aoti_torch_get_data_ptr(tensors[a], (void**)&data)) return 2;
    for (uint64_t i = 0; i < threads; ++i) {
      seed = seed * 1103515245u + 12345u;
      data[i] = argument[0] == 'x' ? (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f : 0.0f;
    }
  }
  for (long k = 0; k < calls; ++k) {
    aoti_torch_mps_start_encoding(kernel);
    for (int a = 0; a < arguments && a < 8; ++a) {
      const char* argument = argv[5 + a];
      if (!strcmp(argument, "x") || !strcmp(argument, "y")) aoti_torch_mps_set_arg_tensor(kernel, (unsigned)a, tensors[a]);
      else aoti_torch_mps_set_arg_int(kernel, (unsigned)a, atoll(argument));
    }
    if (aoti_torch_mps_dispatch_array_with_group_size(kernel, &threads, 1, &group, 1) ||
        etmetal_synchronize(ETMETAL_SYNC_COMMIT_AND_WAIT)) {
      fprintf(stderr, "%s\n", etmetal_last_error());
      return 3;
    }
  }
  return 0;
}
"""


def run(validate: bool, repeat: int, wall: bool, threads: int) -> dict:
    env = dict(os.environ, ETMETAL_VALIDATE="1" if validate else "0", ETMETAL_DEVICE="cpu",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not wall:
        env["ETMETAL_CPU_THREADS"] = "1"
    result = subprocess.run([sys.executable, "-c", CHILD, str(repeat), str(CASES_FOLDER), "wall" if wall else "cpu",
                             json.dumps(CASES), str(threads)], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def count_instructions(calls: int, threads: int) -> tuple:
    """Instructions per dispatch of each kernel, plain and validated."""
    sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent), str(CASES_FOLDER)]
    from callgrind_host import build_host, instructions
    from validated_cases import SOURCE

    plain, checked = {}, {}
    with tempfile.TemporaryDirectory(prefix="etmetal-validation-") as folder:
        binary, library = build_host(HOST.replace("SOURCE_LITERAL", json.dumps(SOURCE)), folder)
        print(f"library {library}; kernels -march=x86-64-v3; 1 worker; {calls} and {2 * calls} calls")
        for name, (arguments, group) in CASES.items():
            for validate, out in ((False, plain), (True, checked)):
                env = dict(os.environ, ETMETAL_DEVICE="cpu", ETMETAL_CPU_THREADS="1", ETMETAL_CPU_ISA="portable",
                           ETMETAL_CXXFLAGS="-march=x86-64-v3", ETMETAL_VALIDATE="1" if validate else "0")
                host_arguments = [name, str(threads), str(group), *map(str, arguments)]
                subprocess.run([str(binary), "1", *host_arguments], env=env, check=True)  # compile once
                small, _ = instructions(binary, [str(calls), *host_arguments], folder, env)
                large, _ = instructions(binary, [str(2 * calls), *host_arguments], folder, env)
                out[name] = (large - small) / calls
    return plain, checked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--wall", action="store_true", help="wall-clock time on every worker thread")
    parser.add_argument("--instructions", action="store_true", help="count instructions with callgrind")
    parser.add_argument("--calls", type=int, default=2, help="N for --instructions (default 2)")
    parser.add_argument("--threads", type=int, help="threads per dispatch (default 2^18; 2^16 with --instructions)")
    args = parser.parse_args()
    threads = args.threads or (1 << 16 if args.instructions else 1 << 18)
    if args.instructions:
        plain, checked = count_instructions(args.calls, threads)
        unit, scale, header = "M instr", 1e-6, f"kernel ({threads} threads)"
    else:
        plain, checked = run(False, args.repeat, args.wall, threads), run(True, args.repeat, args.wall, threads)
        unit, scale, header = "ms", 1e3, f"kernel ({threads} threads)"
    print(f"{header:24} {'plain ' + unit:>14} {'validated ' + unit:>18} {'ratio':>7}")
    for name in plain:
        print(f"{name:24} {plain[name] * scale:14.2f} {checked[name] * scale:18.2f} {checked[name] / plain[name]:7.1f}x")


if __name__ == "__main__":
    main()
