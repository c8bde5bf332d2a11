// The CPU device: host memory as device buffers, and command queues that execute committed
// command buffers in order on a queue thread, as a GPU would. Kernels come from the MSL
// compiler (cpu_pipeline.h).
#pragma once

#include <memory>

#include "device/device.h"

namespace etm::device::cpu {

Status create_cpu_device(std::unique_ptr<Device>* out);

}  // namespace etm::device::cpu
