"""The CPU device's compiler driver: diagnostics at MSL lines, missing kernels, threadgroup
memory limits, the on-disk cache (hits do not run the compiler) and concurrent builders."""

import os
import platform
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import etmetal_py
from cpu_device_testing import ShaderLibrary, device_array, require_cpu_device
from etmetal_py.kernels import compile_library
from etmetal_py.tensors import Tensor

ROOT = Path(__file__).resolve().parents[2]


def compile_error(source):
    require_cpu_device()
    with pytest.raises(etmetal_py.EtmetalError) as error:
        ShaderLibrary(source)
    clear_sticky_error()
    return str(error.value)


def clear_sticky_error():
    """A failed call may also poison the calling thread's stream (the runtime's policy); the
    next synchronize reports and clears it."""
    try:
        etmetal_py.synchronize()
    except etmetal_py.EtmetalError:
        pass


def test_compile_error_names_the_msl_line():
    message = compile_error(textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;

        kernel void broken(device float* out [[buffer(0)]],
                           uint i [[thread_position_in_grid]]) {
          float value = 1.0f;
          out[i] = value + undefined_name;
        }
        """))
    assert "library.metal:7:" in message
    assert "undefined_name" in message
    assert "etm_cpu_kernel" not in message  # no generated-code noise


def test_error_in_one_kernel_of_a_larger_library_is_reported_at_creation():
    message = compile_error(textwrap.dedent("""\
        #include <metal_stdlib>
        kernel void fine(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
          out[i] = 1.0f;
        }
        kernel void wrong(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
          out[i] = out;
        }
        """))
    assert "library.metal:6:" in message


def test_unsupported_kernel_parameter_is_a_translation_error():
    message = compile_error(textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        kernel void sample(texture2d<float> image [[texture(0)]],
                           uint2 i [[thread_position_in_grid]]) {}
        """))
    assert "library.metal:3:" in message and "[[texture]]" in message


def test_static_threadgroup_memory_over_32_kib_is_refused():
    message = compile_error(textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        kernel void hungry(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
          threadgroup float big[8192], more[16];
          big[i] = 1.0f;
          more[i % 16] = 2.0f;
          threadgroup_barrier(mem_flags::mem_threadgroup);
          out[i] = big[(i + 1) % 8192] + more[0];
        }
        """))
    assert "32768" in message and "threadgroup memory" in message


def test_each_kernel_counts_only_its_own_threadgroup_memory():
    """Two kernels of one library with 20,000 bytes each: Metal counts each kernel's own."""
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        kernel void reversed(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
          threadgroup float tile[5000];
          tile[i] = float(i);
          threadgroup_barrier(mem_flags::mem_threadgroup);
          out[i] = tile[63 - i];
        }
        kernel void doubled(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
          threadgroup float tile[5000];
          tile[i] = 2.0f * float(i);
          threadgroup_barrier(mem_flags::mem_threadgroup);
          out[i] = tile[i ^ 1];
        }
        """)
    with compile_library(source) as library:
        for name, expected in (("reversed", np.arange(64)[::-1]), ("doubled", 2 * (np.arange(64) ^ 1))):
            out = np.zeros(64, np.float32)
            library.function(name)(out, threads=64, group=64)
            np.testing.assert_array_equal(out, expected.astype(np.float32))


def test_missing_kernel_name(msl):
    library = msl(textwrap.dedent("""\
        #include <metal_stdlib>
        kernel void present(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
          out[i] = 2.0f;
        }
        """))
    with pytest.raises(etmetal_py.EtmetalError) as error:
        library.kernel("absent")
    assert "absent" in str(error.value) and "present" in str(error.value)
    clear_sticky_error()


# A child process that compiles and runs one kernel with its own cache and compiler, and
# reports the result and how long creating the library took.
CHILD = textwrap.dedent("""\
    import sys, time
    import numpy as np
    import etmetal_py
    from etmetal_py import ffi, lib
    from etmetal_py.tensors import Tensor
    source = open(sys.argv[1]).read()
    handle = ffi.new("AOTIMetalShaderLibraryHandle*")
    start = time.perf_counter()
    etmetal_py.check(lib.aoti_torch_mps_create_shader_library(source.encode(), handle))
    function = ffi.new("AOTIMetalKernelFunctionHandle*")
    etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(handle[0], b"square_plus", function))
    created = time.perf_counter() - start
    values = np.arange(1000, dtype=np.float32)
    x = Tensor.from_array(values, copy=True)
    out = Tensor.empty([1000])
    etmetal_py.check(lib.aoti_torch_mps_start_encoding(function[0]))
    etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(function[0], 0, x.handle))
    etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(function[0], 1, out.handle))
    etmetal_py.check(lib.aoti_torch_mps_set_arg_int(function[0], 2, int(sys.argv[2])))
    etmetal_py.check(lib.aoti_torch_mps_dispatch_single(function[0], 1000))
    etmetal_py.synchronize()
    assert np.array_equal(out.numpy(), values * values + int(sys.argv[2])), "wrong result"
    print("created_seconds", created)
    """)

SQUARE_PLUS = textwrap.dedent("""\
    #include <metal_stdlib>
    using namespace metal;
    kernel void square_plus(constant float* x, device float* out, constant long& plus,
                            uint i [[thread_position_in_grid]]) {
      out[i] = x[i] * x[i] + float(plus);
    }
    """)


@pytest.fixture
def child_setup(tmp_path):
    require_cpu_device()
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "kernel.metal").write_text(SQUARE_PLUS)
    # A compiler wrapper that logs every invocation.
    log = tmp_path / "compiler.log"
    real = None
    for name in ("g++", "clang++"):
        from shutil import which
        real = which(name)
        if real:
            break
    wrapper = tmp_path / "logging-cxx"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ)
    env.update(ETMETAL_CACHE_DIR=str(tmp_path / "cache"), ETMETAL_CXX=str(wrapper),
               ETMETAL_DEVICE="cpu",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    return tmp_path, env, log


def start_child(tmp_path, env, plus):
    return subprocess.Popen([sys.executable, str(tmp_path / "child.py"), str(tmp_path / "kernel.metal"),
                             str(plus)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(child):
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    return float(out.split()[-1])


def compiler_commands(log):
    """The kernel compiles the wrapper logged (not version probes, not the prelude's precompile)."""
    if not log.exists():
        return []
    return [line for line in log.read_text().splitlines()
            if "--version" not in line and "c++-header" not in line]


def compiler_runs(log):
    return len(compiler_commands(log))


def test_cache_hit_does_not_run_the_compiler(child_setup):
    tmp_path, env, log = child_setup
    finish(start_child(tmp_path, env, 3))
    assert compiler_runs(log) == 1
    log_before = log.read_text()
    warm = finish(start_child(tmp_path, env, 4))
    assert log.read_text() == log_before, "a cached kernel invoked the compiler (or its --version)"
    assert warm < 0.25, f"warm library creation took {warm:.3f} s"


def test_precompiled_prelude_is_used_and_a_damaged_one_is_ignored(child_setup):
    """g++ gets the kernel-support headers precompiled; the kernel compiles go through it, and a
    damaged file is passed over for the header text."""
    tmp_path, env, log = child_setup
    finish(start_child(tmp_path, env, 3))
    cache = tmp_path / "cache" / "cpu"
    if "clang" in subprocess.run([env["ETMETAL_CXX"], "--version"], capture_output=True, text=True).stdout:
        assert not list(cache.glob("headers-*/precompiled-*")), "clang got a precompiled prelude"
        return
    (precompiled,) = cache.glob("headers-*/precompiled-*/etm_cpu_prelude.h.gch")
    assert sum("c++-header" in line for line in log.read_text().splitlines()) == 1
    # With the header text unusable, only the precompiled prelude lets a new kernel compile.
    (header,) = cache.glob("headers-*/kernel_support/etm_cpu_prelude.h")
    header.write_text('#error "the precompiled prelude was not used"\n')
    kernel = tmp_path / "kernel.metal"
    kernel.write_text(SQUARE_PLUS + "// a second source\n")
    finish(start_child(tmp_path, env, 4))
    # A damaged precompiled file: g++ reads the header instead (here, the #error).
    precompiled.write_bytes(b"not a precompiled header" * 100)
    kernel.write_text(SQUARE_PLUS + "// a third source\n")
    child = start_child(tmp_path, env, 5)
    _, err = child.communicate(timeout=300)
    assert child.returncode != 0 and "the precompiled prelude was not used" in err


def test_concurrent_compiles_of_one_kernel_from_two_processes(child_setup):
    tmp_path, env, log = child_setup
    children = [start_child(tmp_path, env, plus) for plus in (1, 2)]
    for child in children:
        finish(child)
    cache = tmp_path / "cache" / "cpu"
    assert len(list((cache / "objects").glob("*.so"))) == 1
    assert list((cache / "tmp").iterdir()) == []
    assert len(list(cache.glob("headers-*"))) == 1


def test_thread_locals_do_not_use_tls_descriptors(child_setup):
    """Kernel objects and libetmetal reach their thread-locals through ordinary __tls_get_addr
    calls: code built with -mtls-dialect=gnu2 relies on the descriptor call preserving every
    register, which glibc before 2.40 does not (sourceware bug 31372); CI saw kernels fault
    on a register lost across that call."""
    if platform.machine() != "x86_64":
        pytest.skip("the TLS dialect choice exists on x86-64 only")
    tmp_path, env, log = child_setup
    finish(start_child(tmp_path, env, 3))
    (kernel_object,) = (tmp_path / "cache" / "cpu" / "objects").glob("*.so")
    for binary in (kernel_object, Path(etmetal_py.library_path())):
        relocations = subprocess.run(["readelf", "--relocs", "--wide", str(binary)], capture_output=True,
                                     text=True, check=True).stdout
        assert "TLSDESC" not in relocations, f"{binary.name} uses TLS descriptors"
        assert "R_X86_64_DTPMOD64" in relocations, f"{binary.name} has no dynamic thread-locals to check"


@pytest.mark.slow  # ~15 s of compiles in child processes
def test_target_isa_choice(child_setup):
    """A named (possibly shared) cache gets portable objects unless ETMETAL_CPU_ISA=native;
    native objects are keyed apart from portable ones (and by the host CPU)."""
    tmp_path, env, log = child_setup
    env.pop("ETMETAL_CPU_ISA", None)

    def is_native(command):
        return "-march=native" in command or "-mcpu=native" in command

    finish(start_child(tmp_path, env, 2))  # ETMETAL_CACHE_DIR is set: portable
    finish(start_child(tmp_path, dict(env, ETMETAL_CPU_ISA="native"), 2))
    first, second = compiler_commands(log)
    assert not is_native(first) and is_native(second)
    finish(start_child(tmp_path, dict(env, ETMETAL_CPU_ISA="portable"), 2))
    finish(start_child(tmp_path, dict(env, ETMETAL_CPU_ISA="native"), 2))
    assert len(compiler_commands(log)) == 2, "a cached object of either ISA was built again"


# A child process that runs square_rows (each thread squares one 64-float row through a local
# array: loops g++ vectorizes at -O2) and checks it against numpy.
ROWS_CHILD = textwrap.dedent("""\
    import sys
    import numpy as np
    import etmetal_py
    from etmetal_py import ffi, lib
    from etmetal_py.tensors import Tensor
    handle = ffi.new("AOTIMetalShaderLibraryHandle*")
    etmetal_py.check(lib.aoti_torch_mps_create_shader_library(open(sys.argv[1]).read().encode(), handle))
    function = ffi.new("AOTIMetalKernelFunctionHandle*")
    etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(handle[0], b"square_rows", function))
    values = np.random.default_rng(0).standard_normal(16 * 64).astype(np.float32)
    x = Tensor.from_array(values, copy=True)
    out = Tensor.empty([16 * 64])
    etmetal_py.check(lib.aoti_torch_mps_start_encoding(function[0]))
    etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(function[0], 0, x.handle))
    etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(function[0], 1, out.handle))
    etmetal_py.check(lib.aoti_torch_mps_dispatch_single(function[0], 16))
    etmetal_py.synchronize()
    assert np.array_equal(out.numpy(), values * values + 1.0), "wrong result"
    """)

SQUARE_ROWS = textwrap.dedent("""\
    #include <metal_stdlib>
    using namespace metal;
    kernel void square_rows(constant float* x, device float* out, uint i [[thread_position_in_grid]]) {
      float row[64];
      for (uint j = 0; j < 64; ++j) row[j] = x[i * 64 + j] * x[i * 64 + j];
      for (uint j = 0; j < 64; ++j) out[i * 64 + j] = row[j] + 1.0f;
    }
    """)


def host_cpu_flags():
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.slow  # ~20 s of compiles in child processes
def test_native_vector_width(child_setup):
    """Native x86 kernels vectorize with 512-bit registers where the host has AVX-512F and
    AVX512-VBMI (kernel_compiler.cpp says why), and with at most 256 bits elsewhere and in
    portable objects; the width flag is part of the cache key."""
    if platform.machine() != "x86_64":
        pytest.skip("the vector width choice exists on x86-64 only")
    tmp_path, env, log = child_setup
    (tmp_path / "rows.py").write_text(ROWS_CHILD)
    (tmp_path / "rows.metal").write_text(SQUARE_ROWS)
    objects = tmp_path / "cache" / "cpu" / "objects"

    def build(**settings):
        """Runs the kernel; returns its compile command's words and whether its new object uses zmm."""
        before = set(objects.glob("*.so"))
        subprocess.run([sys.executable, str(tmp_path / "rows.py"), str(tmp_path / "rows.metal")],
                       env=dict(env, **settings), check=True, timeout=300)
        (new_object,) = set(objects.glob("*.so")) - before
        code = subprocess.run(["objdump", "-d", str(new_object)], capture_output=True, text=True,
                              check=True).stdout
        return compiler_commands(log)[-1].split(), "%zmm" in code

    wide = {"avx512f", "avx512vbmi"} <= host_cpu_flags()
    command, uses_zmm = build(ETMETAL_CPU_ISA="native")
    assert ("-mprefer-vector-width=512" in command) == wide and uses_zmm == wide
    # The same kernel at another width is another object (the flags are keyed), built anew.
    command, uses_zmm = build(ETMETAL_CPU_ISA="native", ETMETAL_CXXFLAGS="-mprefer-vector-width=256")
    assert "-mprefer-vector-width=256" in command and not uses_zmm
    command, uses_zmm = build(ETMETAL_CPU_ISA="portable")
    assert "-mprefer-vector-width=512" not in command and not uses_zmm
    assert len(list(objects.glob("*.so"))) == 3

def test_missing_compiler_is_a_clear_error(child_setup):
    tmp_path, env, _ = child_setup
    env["ETMETAL_CXX"] = str(tmp_path / "no-such-compiler")
    child = start_child(tmp_path, env, 0)
    _, err = child.communicate(timeout=120)
    assert child.returncode != 0
    assert "ETMETAL_CXX" in err and "no-such-compiler" in err and "was not found" in err


LOCAL_LOAD = textwrap.dedent("""\
    import ctypes, sys
    etmetal = ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_LOCAL)  # not through etmetal_py (global)
    library, function = ctypes.c_void_p(), ctypes.c_void_p()
    source = open(sys.argv[1]).read().encode()
    assert etmetal.aoti_torch_mps_create_shader_library(source, ctypes.byref(library)) == 0, \\
        ctypes.string_at(etmetal.etmetal_last_error()).decode()
    assert etmetal.aoti_torch_mps_get_kernel_function(library, b"group_sum", ctypes.byref(function)) == 0
    print("loaded")
    """)

BARRIER_KERNEL = textwrap.dedent("""\
    #include <metal_stdlib>
    using namespace metal;
    kernel void group_sum(device float* x [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
      threadgroup float shared[64];
      shared[i] = x[i];
      threadgroup_barrier(mem_flags::mem_threadgroup);
      x[i] = shared[63 - i] + simd_sum(shared[i]);
    }
    """)


def test_kernels_resolve_lane_calls_when_libetmetal_is_loaded_locally(child_setup):
    # Kernel objects get the executor's lane calls (threadgroup_barrier, simd exchange)
    # through their own table, with libetmetal outside the global scope (ctypes: RTLD_LOCAL).
    tmp_path, env, _ = child_setup
    (tmp_path / "local.py").write_text(LOCAL_LOAD)
    (tmp_path / "barrier.metal").write_text(BARRIER_KERNEL)
    result = subprocess.run([sys.executable, str(tmp_path / "local.py"), str(tmp_path / "barrier.metal"),
                             str(etmetal_py.library_path())], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0 and "loaded" in result.stdout, result.stderr


@pytest.mark.slow  # ~13 s of compiles in a child process
def test_cache_limit_evicts_least_recently_used_entries(child_setup):
    """ETMETAL_CACHE_MAX_MB: over the limit, the oldest-used entries go first (an object with
    its kept source, a record, an old header folder, each whole); temporaries older than any
    compile go; 0 means no limit; processes starting within the hour of the last maintenance
    skip it."""
    tmp_path, env, _ = child_setup
    cache = tmp_path / "cache" / "cpu"
    now = time.time()
    entries = {  # name: (files, hours since last use); listed oldest first
        "old headers": (["headers-0123/complete", "headers-0123/metal_include/etm_base.h"], 5),
        "object a": (["objects/aaaa.so", "objects/aaaa.cpp"], 4),
        "object b": (["objects/bbbb.so", "objects/bbbb.cpp"], 3),
        "record": (["translations/cccc"], 2),
        "marker": (["checks/dddd"], 1),
    }
    for files, hours in entries.values():
        for name in files:
            path = cache / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"\0" * 200_000)
            os.utime(path, (now - hours * 3600, now - hours * 3600))
    (cache / "tmp").mkdir()
    stale, in_progress = cache / "tmp" / "12-3.cpp", cache / "tmp" / "45-6.cpp"
    stale.write_text("left by a killed compile")
    os.utime(stale, (now - 48 * 3600, now - 48 * 3600))
    in_progress.write_text("being written by another process")

    def present(name):
        return all((cache / f).exists() for f in entries[name][0])

    finish(start_child(tmp_path, dict(env, ETMETAL_CACHE_MAX_MB="0"), 1))
    assert all(present(name) for name in entries)
    assert not stale.exists() and in_progress.exists()

    # Start-up maintenance walks the whole cache: once an hour among the processes sharing it.
    finish(start_child(tmp_path, dict(env, ETMETAL_CACHE_MAX_MB="1"), 2))
    assert all(present(name) for name in entries)
    marker = cache / "maintained"
    os.utime(marker, (now - 2 * 3600, now - 2 * 3600))

    finish(start_child(tmp_path, dict(env, ETMETAL_CACHE_MAX_MB="1"), 2))
    kept = [present(name) for name in entries]
    assert kept == sorted(kept), f"eviction was not oldest first: {dict(zip(entries, kept))}"
    assert not kept[0] and kept[-1]
    assert not any((cache / f).exists() for f in entries["object a"][0])
    total = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    assert total <= 1 << 20
    assert len(list((cache / "objects").glob("*.so"))) >= 1  # the kernel just used stays

    result = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(tmp_path / "kernel.metal"), "3"],
                            env=dict(env, ETMETAL_CACHE_MAX_MB="-5"), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode != 0 and "ETMETAL_CACHE_MAX_MB must be an integer from 0" in result.stderr
