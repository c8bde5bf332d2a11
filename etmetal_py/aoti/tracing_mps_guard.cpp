// A no-op device guard for "mps", for torch builds without MPS (Linux).
//
// Exporting and compiling for "mps" on such a host works on fake "mps" tensors, but torch
// takes a device guard for the tensor's device in many places that never touch memory
// (Python indexing, autograd metadata, argument parsing of `.to()`), and a build without MPS
// has no guard to give: "PyTorch is not linked with support for mps devices". With this one
// registered, those places go through; creating real "mps" tensors still fails (no MPS
// allocator or kernels). etmetal_py loads it only when torch.backends.mps is unavailable.
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace {
struct TracingMpsGuard final : c10::impl::NoOpDeviceGuardImpl<c10::DeviceType::MPS> {};
}  // namespace

C10_REGISTER_GUARD_IMPL(MPS, TracingMpsGuard)
