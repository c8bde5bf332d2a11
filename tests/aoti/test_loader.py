"""Loading packages: symbol checks, broken packages, input validation, lifetimes, threads."""

import ctypes
import gc
import os
import shutil
import subprocess
import sys
import threading
import tracemalloc
import zipfile

import pytest
import torch

import etmetal_py
from aoti_testing import (allocator_live, assert_outputs_close, load_runner,
                      require_shader_compiler)
from etmetal_py.aoti import PackageError, RunError, aoti_load_package
from etmetal_testing import assert_host_memory_flat, host_mappings_and_rss
from etmetal_py.aoti._symbols import SymbolReadError, undefined_symbols
from etmetal_py.aoti.runner import check_model_symbols

_COMPILER = shutil.which("cc") or shutil.which("gcc")
needs_compiler = pytest.mark.skipif(_COMPILER is None, reason="no C compiler to build test libraries")


def build_library(folder, name: str, source: str) -> str:
    source_path = os.path.join(folder, f"{name}.c")
    with open(source_path, "w") as f:
        f.write(source)
    library = os.path.join(folder, f"lib{name}.so")
    subprocess.run([_COMPILER, "-shared", "-fPIC", "-o", library, source_path], check=True)
    return library


_NEEDS_A_MADE_UP_OP = """
int aoti_torch_empty_strided(void);
int aoti_torch_mps_made_up_op(void);
extern int aoti_torch_weak_optional(void) __attribute__((weak));
int model_entry(void) {
  return aoti_torch_empty_strided() + aoti_torch_mps_made_up_op()
      + (aoti_torch_weak_optional ? aoti_torch_weak_optional() : 0);
}
"""


@needs_compiler
def test_undefined_symbols_match_nm(tmp_path):
    library = build_library(str(tmp_path), "needs", _NEEDS_A_MADE_UP_OP)
    strong, weak = undefined_symbols(library)
    assert {"aoti_torch_empty_strided", "aoti_torch_mps_made_up_op"} <= strong
    assert "aoti_torch_weak_optional" in weak
    assert "model_entry" not in strong | weak
    nm = shutil.which("nm")
    if nm:
        listed = subprocess.run([nm, "-D", "--undefined-only", library], capture_output=True,
                                text=True, check=True).stdout
        names = {line.split()[-1].split("@")[0] for line in listed.splitlines() if line.strip()}
        assert names == strong | weak


def test_unreadable_libraries_are_reported(tmp_path):
    truncated = tmp_path / "truncated.so"
    truncated.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 20)
    with pytest.raises(SymbolReadError):
        undefined_symbols(str(truncated))
    with pytest.raises(PackageError, match="cannot read the symbols"):
        check_model_symbols(str(truncated))


@needs_compiler
def test_a_missing_runtime_function_is_named_before_loading(tmp_path):
    library = build_library(str(tmp_path), "needs", _NEEDS_A_MADE_UP_OP)
    with pytest.raises(PackageError) as failure:
        check_model_symbols(library)
    message = str(failure.value)
    assert "aoti_torch_mps_made_up_op" in message and "does not export" in message
    assert "aoti_torch_empty_strided" not in message  # libetmetal has that one
    assert "aoti_torch_weak_optional" not in message  # weak: may stay undefined

    package = tmp_path / "made_up.pt2"
    with zipfile.ZipFile(package, "w") as archive:
        archive.write(library, "made_up/data/aotinductor/model/abc.wrapper.so")
    with pytest.raises(PackageError, match="aoti_torch_mps_made_up_op"):
        aoti_load_package(str(package))


@needs_compiler
@pytest.mark.skipif(sys.platform == "darwin", reason="ELF loader scopes (macOS: two-level namespace)")
def test_a_model_binds_to_libetmetal_even_when_another_library_provides_the_abi(tmp_path):
    # The provider stays in the global scope for the rest of its process: run in a child, so
    # that later tests do not resolve aoti_torch_dtype_float32 to it.
    here = os.path.dirname(os.path.abspath(__file__))
    tests = os.path.dirname(here)
    code = ("import sys, pathlib; sys.path[:0] = sys.argv[1:4]; import test_loader; "
            "test_loader.check_binding_beside_another_provider(pathlib.Path(sys.argv[4]))")
    result = subprocess.run([sys.executable, "-c", code, here, tests, os.path.dirname(tests), str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def check_binding_beside_another_provider(tmp_path):
    # A library in the global scope defines aoti_torch_dtype_float32 too (as libtorch does).
    provider = build_library(str(tmp_path), "provider",
                             "int aoti_torch_dtype_float32(void) { return 99; }\n")
    ctypes.CDLL(provider, mode=ctypes.RTLD_GLOBAL)
    source = "int aoti_torch_dtype_float32(void);\nint entry(void) { return aoti_torch_dtype_float32(); }\n"
    runtime = etmetal_py.library_path()
    linked = os.path.join(str(tmp_path), "liblinked.so")
    with open(tmp_path / "linked.c", "w") as f:
        f.write(source)
    subprocess.run([_COMPILER, "-shared", "-fPIC", "-o", linked, str(tmp_path / "linked.c"),
                    f"-L{runtime.parent}", f"-l:{runtime.name}"], check=True)
    assert check_model_symbols(linked) is True  # needs RTLD_DEEPBIND
    model = ctypes.CDLL(linked, mode=os.RTLD_NOW | os.RTLD_LOCAL | os.RTLD_DEEPBIND)
    assert model.entry() == 6  # libetmetal's float32 code, not the provider's

    unlinked = build_library(str(tmp_path), "unlinked", source)
    with pytest.raises(PackageError, match=r"does not link libetmetal.*aoti_torch_dtype_float32 "
                                           r"\(from .*libprovider"):
        check_model_symbols(unlinked)


def test_broken_packages_give_clear_errors(tmp_path):
    with pytest.raises(PackageError, match="no such package"):
        aoti_load_package(str(tmp_path / "absent.pt2"))
    garbage = tmp_path / "garbage.pt2"
    garbage.write_bytes(b"this is not a zip archive")
    with pytest.raises(PackageError, match="not a .pt2 package"):
        aoti_load_package(str(garbage))
    empty = tmp_path / "empty.pt2"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("empty/data/aotinductor/other/readme.txt", "no library")
    with pytest.raises(PackageError, match=r"no compiled library for model 'model' "
                                           r"\(models in the package: other\)"):
        aoti_load_package(str(empty))
    with pytest.raises(ValueError, match="num_models"):
        aoti_load_package(str(empty), num_models=0)


def _truncated_copy(source: str, target) -> str:
    data = open(source, "rb").read()
    with zipfile.ZipFile(source) as archive:
        library = next(i for i in archive.infolist() if i.filename.endswith(".so"))
    target.write_bytes(data[:library.header_offset + library.compress_size // 2])
    return str(target)


def test_a_truncated_package_is_refused(packages, tmp_path):
    broken = _truncated_copy(packages.get("weights_in_so").path, tmp_path / "cut.pt2")
    with pytest.raises(PackageError):
        aoti_load_package(broken)


def test_inputs_are_checked_against_the_signature(packages):
    compiled = packages.get("softmax_dynamic")
    with aoti_load_package(compiled.path) as runner:
        assert runner.num_inputs == 1 and runner.num_outputs == 1
        with pytest.raises(TypeError, match="1 tensor input"):
            runner(torch.randn(2, 1000), torch.randn(2, 1000))
        with pytest.raises(TypeError, match="float64"):
            runner(torch.randn(2, 1000, dtype=torch.float64))
        with pytest.raises(ValueError, match=r"expects \(\*, 1000\)"):
            runner(torch.randn(2, 999))
        with pytest.raises(ValueError, match=r"outside the exported range \[1, 64\]"):
            runner(torch.randn(65, 1000))
        with pytest.raises(ValueError, match="dimensions"):
            runner(torch.randn(1000))
        with pytest.raises(TypeError, match="got 0"):
            runner([1.0] * 1000)


def test_a_closed_runner_refuses_to_run(packages):
    runner = aoti_load_package(packages.get("weights_in_so").path)
    folder = runner._state.contents.folder
    assert os.path.isdir(folder)
    runner.close()
    runner.close()  # idempotent
    assert runner.closed and not os.path.exists(folder)
    with pytest.raises(RunError, match="closed"):
        runner(torch.randn(4, 64))


def test_load_close_cycles_free_everything(packages):
    path = packages.get("weights_in_blob").path
    aoti_load_package(path).close()
    gc.collect()
    baseline = allocator_live()
    for _ in range(50):
        runner = aoti_load_package(path)
        assert sorted(runner.constant_fqns) == ["mix", "offset", "scale", "shift"]
        runner.close()
    dropped = aoti_load_package(path)  # freed by garbage collection, not close()
    del dropped
    gc.collect()
    assert allocator_live() == baseline


def test_constants_keep_their_identity(packages):
    # LayerNorm weight and bias have one shape; merging them would lose one.
    with aoti_load_package(packages.get("layernorm").path) as runner:
        assert sorted(runner.constant_fqns) == ["norm.bias", "norm.weight"]


def test_load_run_close_cycles_do_not_grow_device_memory(packages):
    require_shader_compiler()
    compiled = packages.get("weights_in_blob")
    x = compiled.inputs(5)[0]
    expected = compiled.expected((x,))
    for _ in range(5):  # warm-up: kernels, pools, allocator arenas
        with load_runner(compiled.path) as warm:
            warm(x)
    etmetal_py.synchronize()
    gc.collect()
    baseline = allocator_live()
    host_before = host_mappings_and_rss()
    tracemalloc.start()
    try:
        for cycle in range(120):
            if cycle == 20:  # after the caches that fill once
                gc.collect()
                python_before = tracemalloc.get_traced_memory()[0]
            with load_runner(compiled.path) as runner:
                assert_outputs_close(runner(x), expected, 1e-5, 1e-5)
        etmetal_py.synchronize()
        gc.collect()
        python_growth = tracemalloc.get_traced_memory()[0] - python_before
    finally:
        tracemalloc.stop()
    assert allocator_live() == baseline
    # A package opened again maps no new copy of its model library, and keeps no Python
    # object per load (cffi holds every library object it opens: about 7 KiB a load).
    assert_host_memory_flat(host_before, "120 load/run/close cycles")
    assert python_growth < 64 * 1024, f"Python memory grew {python_growth} bytes in 100 cycles"


def test_several_runners_in_one_process(packages):
    require_shader_compiler()
    first, second = packages.get("pointwise"), packages.get("weights_in_so")
    with load_runner(first.path) as a, load_runner(second.path) as b, \
            load_runner(first.path) as a_again:
        for seed in range(3):
            xy = first.inputs(seed)
            x = second.inputs(seed)
            assert_outputs_close(a(*xy), first.expected(xy), 1e-4, 1e-4)
            assert_outputs_close(b(*x), second.expected(x), 1e-5, 1e-5)
            assert_outputs_close(a_again(*xy), first.expected(xy), 1e-4, 1e-4)


@pytest.mark.parametrize("num_models", [1, 2])
def test_four_threads_share_one_runner(packages, num_models):
    require_shader_compiler()
    compiled = packages.get("softmax_dynamic")
    failures = []
    with load_runner(compiled.path, num_models=num_models) as runner:
        def work(thread_index: int) -> None:
            try:
                for step in range(10):
                    batch = 1 + (thread_index * 7 + step) % 9
                    seed = thread_index * 100 + step
                    x = torch.randn(batch, 1000, generator=torch.Generator().manual_seed(seed))
                    assert_outputs_close(runner(x), compiled.expected((x,)), 1e-5, 1e-4)
            except Exception as exc:  # reported by the main thread
                failures.append(f"thread {thread_index}: {exc!r}")

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    assert not failures, failures


def test_close_waits_for_a_run_in_progress(packages):
    require_shader_compiler()
    compiled = packages.get("weights_in_so")
    x = compiled.inputs(0)[0]
    runner = load_runner(compiled.path)
    started, proceed = threading.Event(), threading.Event()
    run_unblocked = runner._run_flat

    def held_run(inputs):
        started.set()
        proceed.wait(30)
        return run_unblocked(inputs)

    runner._run_flat = held_run
    results = []
    worker = threading.Thread(target=lambda: results.append(runner(x)))
    worker.start()
    assert started.wait(30)
    closer = threading.Thread(target=runner.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive() and not runner._state.container is None
    proceed.set()
    closer.join(30)
    worker.join(30)
    assert runner.closed and runner._state.container is None
    assert len(results) == 1
    assert_outputs_close(results[0], compiled.expected((x,)), 1e-5, 1e-5)


def test_a_process_that_ran_models_exits_cleanly(packages):
    require_shader_compiler()
    path = packages.get("weights_in_so").path
    script = (
        "import sys, torch\n"
        "from etmetal_py.aoti import aoti_load_package\n"
        "closed = aoti_load_package(sys.argv[1])\n"
        "closed(torch.randn(4, 64))\n"
        "closed.close()\n"
        "left_open = aoti_load_package(sys.argv[1])\n"
        "print(float(left_open(torch.ones(4, 64)).sum()))\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    environment = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-c", script, path], capture_output=True,
                            text=True, env=environment, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    compiled = packages.get("weights_in_so")
    expected = float(compiled.expected((torch.ones(4, 64),)).sum())
    assert abs(float(result.stdout.strip()) - expected) < 1e-3
