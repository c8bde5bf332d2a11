#include "device/cpu/cpu_pipeline.h"

namespace etm::device::cpu {

Status compile_msl_library(const std::string&, std::shared_ptr<Library>*) {
  return Status::error("no MSL compiler: the CPU device cannot compile shader libraries yet");
}

}  // namespace etm::device::cpu
