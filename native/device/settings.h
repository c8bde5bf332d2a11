// One parser for every ETMETAL_* variable the library reads (the Python layer reads
// ETMETAL_LIBRARY and ETMETAL_GPU_CORES itself). Unset or empty means the default; any other
// value must be one the variable accepts, or reading it fails with "<NAME> must be <accepted>,
// not '<value>'". The runtime checks them all when it starts, so a bad value is an error at
// first use of the library, never silently ignored.
#pragma once

#include <cstdint>
#include <string>

#include "device/device.h"

namespace etm::settings {

using device::Status;

// Leaves *value alone when the variable is unset or empty.
Status read_integer(const char* name, int64_t* value);
Status read_choice(const char* name, std::string* value);
Status read_text(const char* name, std::string* value);

// The first variable with a value it does not accept; ok when all are valid.
Status check_all();
// One line per variable: "NAME=value" or "NAME unset (default: ...)", then what it accepts.
std::string describe();

}  // namespace etm::settings
