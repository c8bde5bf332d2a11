// The Metal device: etm::device::Device over Metal.framework (macOS 14 or later).
//
// Plain C++ on purpose: code outside native/device/metal/ includes this header under
// `#if ETMETAL_HAVE_METAL` without compiling as Objective-C++.
#pragma once

#include <memory>

#include "device/device.h"

namespace etm::device::metal {

// Creates the device over the system default GPU (MTLCreateSystemDefaultDevice).
// Fails with a message when there is no Metal GPU, the OS is older than macOS 14, an
// ETMETAL_* setting is malformed, or a GPU capture requested by ETMETAL_CAPTURE cannot start.
//
// Settings read from the environment at creation:
//   ETMETAL_FAST_MATH=1     compile MSL with fast math (default 0: IEEE-safe math and
//                           precise transcendental functions, as the CPU device computes).
//   ETMETAL_CAPTURE=<path>  record every command of this process into a Metal GPU trace at
//                           <path> (must end in .gputrace and not exist yet; the process needs
//                           MTL_CAPTURE_ENABLED=1). The trace is closed by stop_capture() or
//                           at process exit.
Status create_metal_device(std::unique_ptr<Device>* out);

// Ends the GPU capture started for ETMETAL_CAPTURE and writes the trace file. Does nothing
// when no capture is running; safe to call more than once and from any thread.
void stop_capture();

}  // namespace etm::device::metal
