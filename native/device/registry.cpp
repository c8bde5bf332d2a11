#include "device/cpu/cpu_device.h"
#include "device/device.h"

#if ETMETAL_HAVE_METAL
#include "device/metal/metal_device.h"
#endif

namespace etm::device {

std::vector<std::string> available_device_kinds() {
#if ETMETAL_HAVE_METAL
  return {"metal", "cpu"};
#else
  return {"cpu"};
#endif
}

Status create_device(const std::string& kind, std::unique_ptr<Device>* out) {
  if (kind == "cpu") return cpu::create_cpu_device(out);
#if ETMETAL_HAVE_METAL
  if (kind == "metal") return metal::create_metal_device(out);
#else
  if (kind == "metal") return Status::error("this build of libetmetal has no Metal device (built without macOS Metal)");
#endif
  return Status::error("unknown device '" + kind + "' (ETMETAL_DEVICE must be 'cpu' or 'metal')");
}

}  // namespace etm::device
