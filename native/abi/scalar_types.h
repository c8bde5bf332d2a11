// The dtypes shim.h has a function per scalar type for (aoti_torch_item_<name>,
// aoti_torch_scalar_to_tensor_<name>): X(name, C type, etm::DType member).
#pragma once

#define ETM_ABI_SCALAR_TYPES(X)  \
  X(float32, float, float32)     \
  X(float64, double, float64)    \
  X(uint8, uint8_t, uint8)       \
  X(uint16, uint16_t, uint16)    \
  X(uint32, uint32_t, uint32)    \
  X(uint64, uint64_t, uint64)    \
  X(int8, int8_t, int8)          \
  X(int16, int16_t, int16)       \
  X(int32, int32_t, int32)       \
  X(int64, int64_t, int64)       \
  X(bool, bool, bool_)
