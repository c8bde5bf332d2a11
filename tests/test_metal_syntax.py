"""Type-checks the Metal device's Objective-C++ on Linux, where no Apple SDK exists.

clang compiles native/device/metal/metal_device.mm with -fsyntax-only against the stub SDK
in tests/metal_stubs/ (declarations with Apple's documented signatures):
  - for a Linux target with ARC, as the brief of the device asks;
  - for a macOS target below the device's minimum, with availability warnings as errors, so
    an API newer than macOS 14 used outside @available fails;
  - with the stubs imitating the macOS 15 SDK and the macOS 14 SDK (Xcode 15), so the
    SDK-conditional code compiles both ways.
Negative cases prove the stubs reject what a real SDK rejects. The device's Metal-free rules
(metal_support.h) are compiled with the host C++ compiler and run.
"""

import json
import os
import platform
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ROOT / "native"
STUBS = ROOT / "tests" / "metal_stubs"
DEVICE_SOURCE = NATIVE / "device" / "metal" / "metal_device.mm"

CLANG = shutil.which("clang")
requires_clang = pytest.mark.skipif(
    CLANG is None, reason="clang is not installed (apt-get install clang); .ci/run installs it")

SDK_VERSIONS = {"macOS 26 SDK": 260000, "macOS 15 SDK": 150000, "macOS 14 SDK": 140000}
OBJCXX = ["-x", "objective-c++", "-fobjc-arc", "-fblocks", "-std=c++17"]
WARNINGS = ["-Wall", "-Wextra", "-Werror"]


def linux_target_command(sdk_version=150000):
    # The Linux default (GNU) Objective-C runtime has no ARC; the Apple runtime's rules apply.
    return [CLANG, "-fsyntax-only", *OBJCXX, "-fobjc-runtime=macosx-14.0", *WARNINGS,
            f"-DETM_STUB_SDK_VERSION={sdk_version}", "-isystem", str(STUBS), "-I", str(NATIVE)]


def host_include_directories():
    """The host compiler's system include directories, in search order."""
    result = subprocess.run([CLANG, "-x", "c++", "-E", "-v", os.devnull],
                            capture_output=True, text=True, check=True)
    lines = result.stderr.splitlines()
    start = lines.index("#include <...> search starts here:") + 1
    end = lines.index("End of search list.")
    return [line.strip() for line in lines[start:end]
            if not line.endswith("(framework directory)")]


def macos_target_command(deployment_target, sdk_version=150000):
    """clang for a macOS target, with this host's C and C++ library headers.

    Only the Objective-C++ semantics are checked, so the host's headers stand in for the
    SDK's libc++. On Linux, a Darwin target predefines __nonnull/__nullable (glibc uses the
    names) and not _GNU_SOURCE (libstdc++ needs it).
    """
    arch = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower())
    if arch is None:
        pytest.skip(f"no macOS target for host architecture {platform.machine()}")
    includes = []
    for directory in host_include_directories():
        includes += ["-isystem", directory]
    glibc = (["-U__nonnull", "-U__nullable", "-D_GNU_SOURCE"]
             if platform.system() == "Linux" else [])
    return [CLANG, "-fsyntax-only", f"--target={arch}-apple-macos{deployment_target}",
            "-nostdinc", "-nostdinc++", *glibc, *OBJCXX, *WARNINGS,
            "-Werror=unguarded-availability-new", f"-DETM_STUB_SDK_VERSION={sdk_version}",
            "-isystem", str(STUBS), *includes, "-I", str(NATIVE)]


def compile_file(command, path):
    return subprocess.run([*command, str(path)], capture_output=True, text=True, timeout=120)


def compile_snippet(command, code, tmp_path):
    path = tmp_path / "snippet.mm"
    path.write_text(textwrap.dedent(code))
    return compile_file(command, path)


def assert_compiles(result):
    assert result.returncode == 0, result.stderr


def assert_rejected(result, *patterns):
    assert result.returncode != 0, "clang accepted code that must not compile"
    for pattern in patterns:
        assert re.search(pattern, result.stderr), result.stderr


# ----------------------------------------------------------------------------------------
# The device compiles


@requires_clang
@pytest.mark.parametrize("sdk", SDK_VERSIONS.values(), ids=SDK_VERSIONS.keys())
def test_metal_device_compiles_on_linux_target_with_arc(sdk):
    assert_compiles(compile_file(linux_target_command(sdk), DEVICE_SOURCE))


@requires_clang
@pytest.mark.parametrize("deployment_target", ["13.0", "14.0", "15.0"])
@pytest.mark.parametrize("sdk", SDK_VERSIONS.values(), ids=SDK_VERSIONS.keys())
def test_metal_device_respects_api_availability(deployment_target, sdk):
    # 13.0: every macOS 14/15 API must be guarded; 15.0: deprecated API must not warn.
    assert_compiles(compile_file(macos_target_command(deployment_target, sdk), DEVICE_SOURCE))


@requires_clang
def test_metal_device_header_is_plain_cpp(tmp_path):
    # registry.cpp includes it from a C++ translation unit.
    source = tmp_path / "registry_like.cpp"
    source.write_text(textwrap.dedent("""
        #include "device/metal/metal_device.h"
        etm::device::Status (*create)(std::unique_ptr<etm::device::Device>*) =
            &etm::device::metal::create_metal_device;
        void (*stop)() = &etm::device::metal::stop_capture;
    """))
    result = subprocess.run(
        [CLANG, "-fsyntax-only", "-x", "c++", "-std=c++17", *WARNINGS, "-I", str(NATIVE),
         str(source)], capture_output=True, text=True, timeout=120)
    assert_compiles(result)


# ----------------------------------------------------------------------------------------
# The stubs and the check have teeth

DEVICE_PRELUDE = """
    #import <Foundation/Foundation.h>
    #import <Metal/Metal.h>
"""


@requires_clang
def test_arc_is_in_force(tmp_path):
    code = DEVICE_PRELUDE + """
        void* leak(NSString* text) { return (void*)text; }
    """
    assert_rejected(compile_snippet(linux_target_command(), code, tmp_path),
                    r"requires a bridged cast")
    bridged = DEVICE_PRELUDE + """
        void* view(NSString* text) { return (__bridge void*)text; }
        void release(NSString* text) { [text release]; }
    """
    assert_rejected(compile_snippet(linux_target_command(), bridged, tmp_path),
                    r"ARC forbids explicit message send of 'release'")


@requires_clang
def test_stubs_accept_correct_use(tmp_path):
    # The same calls as the negative cases below, spelled right: the rejections are theirs.
    code = DEVICE_PRELUDE + """
        id<MTLBuffer> make(id<MTLDevice> device) {
          return [device newBufferWithLength:64 options:MTLResourceStorageModeShared];
        }
        void bind(id<MTLComputeCommandEncoder> encoder, id<MTLBuffer> buffer) {
          [encoder setBuffer:buffer offset:0 atIndex:0];
          [encoder dispatchThreads:MTLSizeMake(4, 1, 1) threadsPerThreadgroup:MTLSizeMake(4, 1, 1)];
        }
        void options(MTLCompileOptions* options) { options.languageVersion = MTLLanguageVersion3_1; }
    """
    assert_compiles(compile_snippet(linux_target_command(), code, tmp_path))


@requires_clang
def test_stubs_reject_misspelled_selector(tmp_path):
    code = DEVICE_PRELUDE + """
        id<MTLBuffer> make(id<MTLDevice> device) {
          return [device newBufferWithLenght:64 options:MTLResourceStorageModeShared];
        }
    """
    assert_rejected(compile_snippet(linux_target_command(), code, tmp_path),
                    r"newBufferWithLenght:options:")


@requires_clang
def test_stubs_reject_wrong_argument_types(tmp_path):
    wrong_object = DEVICE_PRELUDE + """
        void bind(id<MTLComputeCommandEncoder> encoder, id<MTLComputePipelineState> state) {
          [encoder setBuffer:state offset:0 atIndex:0];
        }
    """
    assert_rejected(compile_snippet(linux_target_command(), wrong_object, tmp_path),
                    r"id<MTLComputePipelineState>")
    wrong_struct = DEVICE_PRELUDE + """
        void dispatch(id<MTLComputeCommandEncoder> encoder) {
          [encoder dispatchThreads:64 threadsPerThreadgroup:MTLSizeMake(4, 1, 1)];
        }
    """
    assert_rejected(compile_snippet(linux_target_command(), wrong_struct, tmp_path),
                    r"MTLSize")
    wrong_enum = DEVICE_PRELUDE + """
        void options(MTLCompileOptions* options) { options.languageVersion = 0x30001; }
    """
    assert_rejected(compile_snippet(linux_target_command(), wrong_enum, tmp_path),
                    r"MTLLanguageVersion")


@requires_clang
def test_stubs_reject_unguarded_newer_api(tmp_path):
    code = DEVICE_PRELUDE + """
        void attach(id<MTLCommandQueue> queue, id<MTLResidencySet> set) {
          [queue addResidencySet:set];
        }
    """
    assert_rejected(compile_snippet(macos_target_command("14.0"), code, tmp_path),
                    r"only available on macOS 15\.0 or newer")
    guarded = DEVICE_PRELUDE + """
        void attach(id<MTLCommandQueue> queue, id set) {
          if (@available(macOS 15.0, *)) {
            id<MTLResidencySet> residency = set;
            [queue addResidencySet:residency];
          }
        }
    """
    assert_compiles(compile_snippet(macos_target_command("14.0"), guarded, tmp_path))


@requires_clang
def test_stubs_reject_unguarded_mpsndarray_offset(tmp_path):
    # MPSNDArray over a buffer offset is macOS 15 API: the device guards it.
    code = DEVICE_PRELUDE + """
        #import <MetalPerformanceShaders/MetalPerformanceShaders.h>
        MPSNDArray* view(id<MTLBuffer> buffer, MPSNDArrayDescriptor* descriptor) {
          return [[MPSNDArray alloc] initWithBuffer:buffer offset:16 descriptor:descriptor];
        }
    """
    assert_rejected(compile_snippet(macos_target_command("14.0"), code, tmp_path),
                    r"only available on macOS 15\.0 or newer")
    assert_rejected(compile_snippet(linux_target_command(140000), code, tmp_path),
                    r"initWithBuffer:offset:descriptor:")


@requires_clang
def test_older_sdk_stub_lacks_macos15_api(tmp_path):
    code = DEVICE_PRELUDE + """
        void configure(MTLCompileOptions* options) { options.mathMode = MTLMathModeSafe; }
    """
    assert_compiles(compile_snippet(linux_target_command(150000), code, tmp_path))
    assert_rejected(compile_snippet(linux_target_command(140000), code, tmp_path),
                    r"MTLMathModeSafe|mathMode")


# ----------------------------------------------------------------------------------------
# The device's Metal-free rules, run on the host

SUPPORT_PROGRAM = r"""
#include <cstdio>
#include <string>
#include "device/metal/metal_builtin_kernels.h"
#include "device/metal/metal_support.h"

using namespace etm::device;
using namespace etm::device::metal;

static std::string quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

int main() {
  std::string json = "{";
  auto add = [&json](const std::string& key, const std::string& value) {
    if (json.size() > 1) json += ",";
    json += quote(key) + ":" + value;
  };
  for (long code : {0L, 1L, 2L, 3L, 4L, 5L, 7L, 8L, 9L, 10L, 11L, 12L, 99L})
    add("error " + std::to_string(code),
        quote(support::describe_command_buffer_error(code, "GPU said so")));
  add("foreign", quote(support::describe_foreign_command_buffer_error("NSPOSIXErrorDomain", 12,
                                                                      "Cannot allocate")));
  add("no error object", quote(support::describe_foreign_command_buffer_error("", 0, "")));
  for (const char* path : {"/tmp/run.gputrace", "/tmp/run.trace", ".gputrace"}) {
    Status status = support::check_capture_path(path);
    add(std::string("capture ") + path, status.ok() ? "null" : quote(status.message()));
  }
  struct RoundCase { size_t value, multiple; };
  for (RoundCase c : {RoundCase{0, 16384}, RoundCase{1, 16384}, RoundCase{16384, 16384},
                      RoundCase{16385, 16384}, RoundCase{17, 16}, RoundCase{SIZE_MAX, 16},
                      RoundCase{SIZE_MAX - 15, 16}}) {
    size_t out = 0;
    bool ok = support::round_up(c.value, c.multiple, &out);
    add("round " + std::to_string(c.value) + " " + std::to_string(c.multiple),
        ok ? quote(std::to_string(out)) : "null");
  }
  alignas(16384) static char page[3 * 16384];
  add("wrap aligned", support::can_wrap_in_place(page, 2 * 16384, 16384) ? "true" : "false");
  add("wrap short", support::can_wrap_in_place(page, 16384 + 1, 16384) ? "true" : "false");
  add("wrap offset", support::can_wrap_in_place(page + 64, 16384, 16384) ? "true" : "false");
  add("wrap empty", support::can_wrap_in_place(page, 0, 16384) ? "true" : "false");
  add("wrap null", support::can_wrap_in_place(nullptr, 16384, 16384) ? "true" : "false");
  add("fits inside", support::range_fits(8, 8, 16) ? "true" : "false");
  add("fits past end", support::range_fits(8, 9, 16) ? "true" : "false");
  add("fits overflow", support::range_fits(8, SIZE_MAX, 16) ? "true" : "false");
  add("fits offset past end", support::range_fits(17, 0, 16) ? "true" : "false");
  add("blit aligned", support::blit_aligned(4, 8, 12) ? "true" : "false");
  add("blit odd length", support::blit_aligned(4, 8, 13) ? "true" : "false");
  add("blit odd offset", support::blit_aligned(2, 8, 12) ? "true" : "false");
  struct GroupCase { Size3 group; uint32_t max; };
  for (GroupCase c : {GroupCase{{256, 1, 1}, 1024}, GroupCase{{32, 32, 1}, 1024},
                      GroupCase{{32, 32, 2}, 1024}, GroupCase{{0, 1, 1}, 1024},
                      GroupCase{{uint64_t{1} << 32, uint64_t{1} << 32, 1}, 1024}}) {
    add("group " + std::to_string(c.group.x) + "x" + std::to_string(c.group.y) + "x" +
            std::to_string(c.group.z),
        quote(support::check_threads_per_group(c.group, c.max)));
  }
  for (size_t remaining : {size_t{0}, size_t{100}, size_t{1} << 31, (size_t{1} << 31) + 4,
                           size_t{5} << 30}) {
    std::string chunks;
    for (size_t left = remaining; left > 0; left -= support::next_blit_chunk(left))
      chunks += (chunks.empty() ? "" : " ") + std::to_string(support::next_blit_chunk(left));
    add("blit chunks " + std::to_string(remaining), quote(chunks));
  }
  add("empty grid", support::grid_is_empty(Size3{4, 0, 1}) ? "true" : "false");
  add("full grid", support::grid_is_empty(Size3{4, 1, 1}) ? "true" : "false");
  add("builtin source", quote(kBuiltinKernelSource));
  auto layout_name = [](GraphLayout layout) {
    return layout == GraphLayout::row_major ? "\"row_major\"" : layout == GraphLayout::last_two_swapped ? "\"swapped\"" : "\"other\"";
  };
  add("layout contiguous", layout_name(graph_layout({2, 3, 4}, {12, 4, 1})));
  add("layout transposed", layout_name(graph_layout({3, 4}, {1, 3})));
  add("layout batch transposed", layout_name(graph_layout({2, 3, 4}, {12, 1, 3})));
  add("layout padded rows", layout_name(graph_layout({3, 4}, {8, 1})));
  add("layout broadcast", layout_name(graph_layout({3, 4}, {0, 1})));
  add("layout unit dimension", layout_name(graph_layout({1, 4}, {99, 1})));
  GraphWorkload base;
  base.inputs.resize(2);
  base.inputs[0].sizes = {3, 4};
  base.inputs[0].strides = {4, 1};
  base.inputs[1].sizes = {4, 5};
  base.inputs[1].strides = {5, 1};
  base.output.sizes = {3, 5};
  base.output.strides = {5, 1};
  GraphWorkload moved = base;
  moved.inputs[0].offset = 64;
  GraphWorkload transposed = base;
  transposed.inputs[1].strides = {1, 4};
  GraphWorkload half = base;
  for (GraphOperand* operand : {&half.inputs[0], &half.inputs[1], &half.output}) operand->dtype = GraphDataType::float16;
  GraphWorkload scaled = base;
  scaled.alpha = 0.5;
  GraphWorkload convolution = base;
  convolution.op = GraphWorkload::Op::convolution2d;
  const std::string key = support::graph_cache_key(base);
  add("key same memory moved", support::graph_cache_key(moved) == key ? "true" : "false");
  add("key strides", support::graph_cache_key(transposed) == key ? "true" : "false");
  add("key dtype", support::graph_cache_key(half) == key ? "true" : "false");
  add("key alpha", support::graph_cache_key(scaled) == key ? "true" : "false");
  add("key op", support::graph_cache_key(convolution) == key ? "true" : "false");
  std::printf("%s}\n", json.c_str());
  return 0;
}
"""


@pytest.fixture(scope="module")
def support_results(tmp_path_factory):
    compiler = shutil.which("c++") or shutil.which("g++") or CLANG
    if compiler is None:
        pytest.skip("no C++ compiler")
    directory = tmp_path_factory.mktemp("metal_support")
    source = directory / "support_check.cpp"
    binary = directory / "support_check"
    source.write_text(SUPPORT_PROGRAM)
    subprocess.run([compiler, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-I", str(NATIVE),
                    str(source), "-o", str(binary)], check=True, capture_output=True,
                   timeout=120)
    output = subprocess.run([str(binary)], check=True, capture_output=True, text=True,
                            timeout=60).stdout
    return json.loads(output)


def test_command_buffer_errors_are_named(support_results):
    expected = {
        1: ("internal error", "MTLCommandBufferErrorInternal"),
        2: ("timeout", "MTLCommandBufferErrorTimeout"),
        3: ("page fault", "MTLCommandBufferErrorPageFault"),
        4: ("access revoked", "MTLCommandBufferErrorAccessRevoked"),
        7: ("not permitted", "MTLCommandBufferErrorNotPermitted"),
        8: ("out of memory", "MTLCommandBufferErrorOutOfMemory"),
        9: ("invalid resource", "MTLCommandBufferErrorInvalidResource"),
        10: ("memoryless", "MTLCommandBufferErrorMemoryless"),
        11: ("device removed", "MTLCommandBufferErrorDeviceRemoved"),
        12: ("stack overflow", "MTLCommandBufferErrorStackOverflow"),
    }
    for code, (name, constant) in expected.items():
        message = support_results[f"error {code}"]
        assert message.startswith(f"Metal command buffer failed: {name} ({constant}): "), message
        assert message.endswith(". Metal says: GPU said so"), message
    assert "out-of-bounds" in support_results["error 3"]
    assert "blacklisted" in support_results["error 4"].lower()
    # Codes Metal does not define (5, 6) or may add later still carry the number.
    assert support_results["error 5"] == (
        "Metal command buffer failed: unknown MTLCommandBufferError code 5. "
        "Metal says: GPU said so")
    assert "code 99" in support_results["error 99"]
    assert support_results["foreign"] == (
        "Metal command buffer failed: NSPOSIXErrorDomain error 12: Cannot allocate")
    assert support_results["no error object"] == (
        "Metal command buffer failed without reporting an error")


def test_capture_path_must_be_a_gputrace(support_results):
    assert support_results["capture /tmp/run.gputrace"] is None
    assert "ending in .gputrace" in support_results["capture /tmp/run.trace"]
    assert "ending in .gputrace" in support_results["capture .gputrace"]


def test_sizes_and_alignment(support_results):
    size_max = 2**64 - 1
    assert support_results["round 0 16384"] == "0"
    assert support_results["round 1 16384"] == "16384"
    assert support_results["round 16384 16384"] == "16384"
    assert support_results["round 16385 16384"] == "32768"
    assert support_results["round 17 16"] == "32"
    assert support_results[f"round {size_max} 16"] is None  # would overflow
    assert support_results[f"round {size_max - 15} 16"] == str(size_max - 15)
    assert support_results["wrap aligned"] is True
    for case in ("wrap short", "wrap offset", "wrap empty", "wrap null"):
        assert support_results[case] is False, case
    assert support_results["fits inside"] is True
    for case in ("fits past end", "fits overflow", "fits offset past end"):
        assert support_results[case] is False, case
    assert support_results["blit aligned"] is True
    assert support_results["blit odd length"] is False
    assert support_results["blit odd offset"] is False


def test_blit_copies_split_at_2_gib(support_results):
    gib = 1 << 30
    assert support_results["blit chunks 0"] == ""
    assert support_results["blit chunks 100"] == "100"
    assert support_results[f"blit chunks {2 * gib}"] == str(2 * gib)
    assert support_results[f"blit chunks {2 * gib + 4}"] == f"{2 * gib} 4"
    assert support_results[f"blit chunks {5 * gib}"] == f"{2 * gib} {2 * gib} {gib}"


def test_threadgroup_checks(support_results):
    assert support_results["group 256x1x1"] == ""
    assert support_results["group 32x32x1"] == ""
    assert support_results["group 32x32x2"] == (
        "threadgroup size 32x32x2 exceeds the pipeline's maximum of 1024 threads")
    assert support_results["group 0x1x1"] == "threadgroup size 0x1x1 has a zero dimension"
    # 2^32 x 2^32 would wrap a 64-bit product to 0; it must still be refused.
    assert "exceeds" in support_results["group 4294967296x4294967296x1"]
    assert support_results["empty grid"] is True
    assert support_results["full grid"] is False


def test_graph_layouts_and_cache_keys(support_results):
    assert support_results["layout contiguous"] == "row_major"
    assert support_results["layout transposed"] == "swapped"
    assert support_results["layout batch transposed"] == "swapped"
    assert support_results["layout padded rows"] == "other"
    assert support_results["layout broadcast"] == "other"
    assert support_results["layout unit dimension"] == "row_major"
    # The key is what the compiled graph depends on, not the memory it is fed.
    assert support_results["key same memory moved"] is True
    for changed in ("key strides", "key dtype", "key alpha", "key op"):
        assert support_results[changed] is False, changed


def test_builtin_kernel_source_declares_both_kernels(support_results):
    source = support_results["builtin source"]
    assert "kernel void etm_copy_bytes(" in source
    assert "kernel void etm_fill_bytes(" in source


# ----------------------------------------------------------------------------------------
# The Metal device's own byte copy/fill kernels, run on the active device (the CPU device
# on Linux, Metal on a Mac) through the C ABI.

BUILTIN_HEADER = NATIVE / "device" / "metal" / "metal_builtin_kernels.h"


@pytest.fixture(scope="module")
def builtin_kernels():
    import etmetal_py
    from etmetal_py import ffi, lib

    source = re.search(r'R"MSL\((.*)\)MSL"', BUILTIN_HEADER.read_text(), re.S).group(1)
    library = ffi.new("AOTIMetalShaderLibraryHandle*")
    if lib.aoti_torch_mps_create_shader_library(source.encode(), library) != 0:
        message = etmetal_py.last_error()
        if "cannot compile shader libraries yet" in message:
            pytest.skip(f"{etmetal_py.device_name()} has no MSL compiler in this build")
        pytest.fail(message)
    kernels = {}
    for name in ("etm_copy_bytes", "etm_fill_bytes"):
        function = ffi.new("AOTIMetalKernelFunctionHandle*")
        etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(library[0], name.encode(),
                                                                function))
        kernels[name] = function[0]
    yield kernels
    etmetal_py.check(lib.aoti_torch_mps_delete_shader_library(library[0]))


def run_builtin(function, tensors, threads, group):
    import etmetal_py
    from etmetal_py import lib

    etmetal_py.check(lib.aoti_torch_mps_start_encoding(function))
    for index, tensor in enumerate(tensors):
        etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(function, index, tensor.handle))
    etmetal_py.check(lib.aoti_torch_mps_dispatch_single_with_group_size(function, threads, group))
    etmetal_py.synchronize()


@pytest.mark.parametrize("threads, group", [(64, 32), (1000, 256), (1, 1)])
def test_builtin_copy_handles_unaligned_ranges(builtin_kernels, threads, group):
    import numpy as np
    from etmetal_py import Tensor

    source = np.random.default_rng(threads).integers(0, 256, 1000, dtype=np.uint8)
    destination = np.full(1000, 0xEE, dtype=np.uint8)
    # Odd offsets and length: what the blit encoder cannot take on macOS. Fewer threads than
    # bytes make each thread loop.
    arguments = np.array([3, 5, 701], dtype=np.uint64)  # ByteCopyArguments
    tensors = [Tensor.from_array(a, copy=True) for a in (source, destination, arguments)]
    run_builtin(builtin_kernels["etm_copy_bytes"], tensors, threads, group)
    expected = destination.copy()
    expected[5:706] = source[3:704]
    np.testing.assert_array_equal(tensors[1].numpy(), expected)


def test_builtin_fill_handles_unaligned_ranges(builtin_kernels):
    import numpy as np
    from etmetal_py import Tensor

    destination = np.arange(512, dtype=np.uint32).astype(np.uint8)
    # ByteFillArguments: offset, length, then the byte value in the low half of a uint64.
    arguments = np.array([7, 301, 0xAB], dtype=np.uint64)
    tensors = [Tensor.from_array(a, copy=True) for a in (destination, arguments)]
    run_builtin(builtin_kernels["etm_fill_bytes"], tensors, 96, 32)
    expected = destination.copy()
    expected[7:308] = 0xAB
    np.testing.assert_array_equal(tensors[0].numpy(), expected)


# ----------------------------------------------------------------------------------------
# The Metal device run against a fake Metal (tests/metal_stubs/fake/): its logic on Linux.
# Objective-C needs a runtime; Linux distributions ship none with ARC, so the fake brings a
# small one (objc_runtime.cpp) for the GNUstep 2.0 ABI, with message sends compiled as
# lookup-then-call ("legacy" dispatch) so that it needs no assembly.

FAKE = STUBS / "fake"
FAKE_SCENARIOS = ["device_properties", "buffers", "no_copy", "compile_options", "libraries",
                  "function_constants", "residency", "dispatches", "blits", "encoding_errors",
                  "gpu_failure", "lifetimes", "completion", "graphs"]


@pytest.fixture(scope="module")
def fake_device_binary(tmp_path_factory):
    if CLANG is None:
        pytest.skip("clang is not installed")
    clangxx = shutil.which("clang++") or CLANG
    directory = tmp_path_factory.mktemp("fake_metal")
    cxx = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-I", str(NATIVE), "-I", str(FAKE)]
    objc = ["-x", "objective-c++", "-fobjc-runtime=gnustep-2.0", "-Xclang",
            "-fobjc-dispatch-method=legacy", "-fblocks", "-DETM_STUB_SDK_VERSION=260000",
            "-isystem", str(STUBS), *cxx]
    units = [
        (FAKE / "fake_foundation_root.mm", [*objc, "-fno-objc-arc"]),
        (FAKE / "fake_metal.mm", [*objc, "-fobjc-arc"]),
        (DEVICE_SOURCE, [*objc, "-fobjc-arc"]),
        (FAKE / "device_scenarios.cpp", ["-x", "c++", *cxx]),
        (FAKE / "objc_runtime.cpp", ["-x", "c++", *cxx]),
        (NATIVE / "device" / "settings.cpp", ["-x", "c++", *cxx]),
    ]
    objects = []
    for source, flags in units:
        target = directory / (source.stem + ".o")
        result = subprocess.run([clangxx, "-c", "-g", *flags, str(source), "-o", str(target)],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        objects.append(str(target))
    binary = directory / "device_scenarios"
    result = subprocess.run([clangxx, *objects, "-pthread", "-o", str(binary)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return binary


def run_scenario(binary, scenario, **environment):
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ETMETAL_", "MTL_CAPTURE", "FAKE_METAL"))}
    env.update(environment)
    return subprocess.run([str(binary), scenario], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.parametrize("scenario", FAKE_SCENARIOS)
def test_metal_device_on_fake_metal(fake_device_binary, scenario):
    # The fake device's working set is 1 MiB: a 1 MiB residency set can fill it.
    settings = {"ETMETAL_RESIDENT_MB": "1"} if scenario == "residency" else {}
    result = run_scenario(fake_device_binary, scenario, **settings)
    assert result.returncode == 0 and result.stdout.endswith("done\n"), (
        result.stdout + result.stderr)


def test_metal_device_graphs_survive_mpsgraph_commits_on_fake_metal(fake_device_binary):
    # MPSGraph may commit the work encoded so far and continue in a new command buffer
    # (commitAndContinue): results, order and completion must hold all the same.
    result = run_scenario(fake_device_binary, "graphs", FAKE_METAL_GRAPH_COMMITS="1")
    assert result.returncode == 0 and result.stdout.endswith("done\n"), (
        result.stdout + result.stderr)


def test_metal_device_fast_math_on_fake_metal(fake_device_binary):
    result = run_scenario(fake_device_binary, "compile_options", ETMETAL_FAST_MATH="1")
    assert result.returncode == 0 and result.stdout.endswith("done\n"), (
        result.stdout + result.stderr)


def creation_report(binary, **environment):
    result = run_scenario(binary, "capture", **environment)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


def test_metal_device_creation_errors_on_fake_metal(fake_device_binary):
    lines = creation_report(fake_device_binary, FAKE_METAL_NO_DEVICE="1")
    assert lines[0].startswith("create: no Metal GPU: MTLCreateSystemDefaultDevice returned nil")
    # No default device in a command-line tool, but Metal lists the GPU: use it.
    assert creation_report(fake_device_binary, FAKE_METAL_NO_DEFAULT_DEVICE="1")[0] == "create: ok"
    # A residency set is an optimization: without one the device still works.
    assert creation_report(fake_device_binary, FAKE_METAL_NO_RESIDENCY_SET="1")[0] == "create: ok"
    lines = creation_report(fake_device_binary, ETMETAL_FAST_MATH="yes")
    assert lines[0] == "create: ETMETAL_FAST_MATH must be one of 0 or 1, not 'yes'"
    lines = creation_report(fake_device_binary, ETMETAL_RESIDENT_MB="-1")
    assert lines[0].startswith("create: ETMETAL_RESIDENT_MB must be an integer from 0 to")


def test_gpu_capture_on_fake_metal(fake_device_binary, tmp_path):
    trace = tmp_path / "run.gputrace"
    lines = creation_report(fake_device_binary, ETMETAL_CAPTURE=str(trace))
    assert "run it with MTL_CAPTURE_ENABLED=1" in lines[0]
    lines = creation_report(fake_device_binary, ETMETAL_CAPTURE=str(tmp_path / "run.trace"),
                            MTL_CAPTURE_ENABLED="1")
    assert "must name a file ending in .gputrace" in lines[0]

    lines = creation_report(fake_device_binary, ETMETAL_CAPTURE=str(trace),
                            MTL_CAPTURE_ENABLED="1")
    assert lines[:3] == ["create: ok", "capturing: 1", "capturing after stop: 0"]
    assert (trace / "stopped").exists()
    # Metal will not overwrite a trace; the device reports Metal's reason.
    lines = creation_report(fake_device_binary, ETMETAL_CAPTURE=str(trace),
                            MTL_CAPTURE_ENABLED="1")
    assert lines[0].startswith(f"create: ETMETAL_CAPTURE: cannot start a GPU capture to '{trace}'")
    assert lines[0].endswith("Capture file already exists")

    at_exit = tmp_path / "exit.gputrace"
    result = run_scenario(fake_device_binary, "capture_at_exit", ETMETAL_CAPTURE=str(at_exit),
                          MTL_CAPTURE_ENABLED="1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (at_exit / "stopped").exists(), "the capture is stopped at process exit"
