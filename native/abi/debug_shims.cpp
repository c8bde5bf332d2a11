// The debugging and profiling functions of torch's shim.h (etmetal/aoti_shim_debug.h):
// check_inf_and_nan, print_tensor_handle, IValues and record_function scopes.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "abi/guard.h"
#include "abi/handles.h"
#include "device/device.h"
#include "etmetal/aoti_shim_debug.h"
#include "ops/op_support.h"
#include "runtime/dtype.h"
#include "runtime/trace.h"

using namespace etm;
using etm::abi::guarded;
using etm::abi::require_out;
using etm::abi::tensor_of;

namespace {

// A host float64 (complex128 for complex dtypes) contiguous copy of t's elements, once the
// calling thread's stream and any other stream writing t have finished.
std::unique_ptr<Tensor> host_values(const Tensor& t) {
  Runtime& runtime = Runtime::get();
  Stream& stream = runtime.current_stream();
  stream.wait_idle();
  if (t.storage->buffer) stream.wait_for_other_streams(t.storage->buffer);
  const DType wide = is_complex_dtype(t.dtype) ? DType::complex128 : DType::float64;
  auto copy = runtime.empty_tensor(t.sizes, contiguous_strides(t.sizes), static_cast<int32_t>(wide), kDeviceCpu);
  if (t.numel() > 0) copy_elements(*copy, t);
  return copy;
}

bool is_real_floating(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::float16:
    case DType::bfloat16:
    case DType::float32:
    case DType::float64:
      return true;
    default:
      return false;
  }
}

bool is_contiguous(const Tensor& t) {
  int64_t expected = 1;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    if (t.sizes[d] == 1) continue;
    if (t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

constexpr int64_t kMaxPrintedValues = 64;

// A string, a list of strings, an int64 or a tensor (record_function's inputs and kwargs).
using IValue = std::variant<int64_t, std::string, std::vector<std::string>, std::unique_ptr<Tensor>>;

abi::HandleRegistry<IValue>& ivalues() {
  static auto* live = new abi::HandleRegistry<IValue>("IValue");
  return *live;
}

struct RecordFunctionScope {
  std::string name;
  uint64_t inputs;
  double start_us;
};

abi::HandleRegistry<RecordFunctionScope>& record_functions() {
  static auto* live = new abi::HandleRegistry<RecordFunctionScope>("record function");
  return *live;
}

void add_ivalue(C10IValueHandle* ret, IValue value) {
  require_out(ret, "ivalue");
  *ret = reinterpret_cast<C10IValueHandle>(ivalues().add(std::make_unique<IValue>(std::move(value))));
}

}  // namespace

extern "C" AOTITorchError aoti_torch_check_inf_and_nan(const char* tensor_name, AtenTensorHandle tensor) {
  return guarded(__func__, [&] {
    const Tensor& t = tensor_of(tensor);
    const bool complex = is_complex_dtype(t.dtype);
    if (!complex && !is_real_floating(t.dtype)) return;
    auto values = host_values(t);
    const double* data = reinterpret_cast<const double*>(values->data());
    const int64_t count = t.numel() * (complex ? 2 : 1);
    const std::string name = tensor_name ? tensor_name : "(unnamed tensor)";
    for (int64_t i = 0; i < count; ++i) {
      ETM_REQUIRE(!std::isnan(data[i]), "At least one NaN in ", name);
    }
    for (int64_t i = 0; i < count; ++i) {
      ETM_REQUIRE(!std::isinf(data[i]), "At least one INF in ", name);
    }
  });
}

extern "C" void aoti_torch_print_tensor_handle(AtenTensorHandle self, const char* msg) {
  std::ostringstream out;
  const AOTITorchError code = guarded(__func__, [&] {
    const Tensor& t = tensor_of(self);
    auto values = host_values(t);
    const double* data = reinterpret_cast<const double*>(values->data());
    const bool complex = is_complex_dtype(t.dtype);
    const int64_t numel = t.numel();
    out << "[  " << (msg ? msg : "") << "  ]:\n";
    if (numel <= kMaxPrintedValues) {
      out << "Values: [";
      for (int64_t i = 0; i < numel; ++i) {
        out << (i ? ", " : "");
        if (complex) {
          out << data[2 * i] << (data[2 * i + 1] < 0 ? "" : "+") << data[2 * i + 1] << "j";
        } else {
          out << data[i];
        }
      }
      out << "]\n";
    }
    out << "Number of elements: " << numel << "\n";
    out << "Dtype: " << dtype_name(t.dtype) << "\n";
    if (numel > 0 && !complex) {
      double sum = 0.0, low = data[0], high = data[0];
      for (int64_t i = 0; i < numel; ++i) {
        sum += data[i];
        low = std::fmin(low, data[i]);
        high = std::fmax(high, data[i]);
      }
      out << "Mean value: " << sum / static_cast<double>(numel) << "\n";
      out << "Min value: " << low << "\n";
      out << "Max value: " << high << "\n";
    }
    out << "Device: " << (t.device_type == kDeviceMps ? "mps" : "cpu") << "\n";
    out << "Size: " << etm::ops::shape_text(t.sizes) << "\n";
    out << "Stride: " << etm::ops::shape_text(t.strides) << "\n";
    out << "Is contiguous: " << (is_contiguous(t) ? 1 : 0) << "\n\n";
  });
  if (code != 0) out << "[  " << (msg ? msg : "") << "  ]: " << last_error() << "\n\n";
  std::fputs(out.str().c_str(), stdout);
  std::fflush(stdout);
}

extern "C" AOTITorchError aoti_torch_int64_to_ivalue(int64_t val, C10IValueHandle* ivalue) {
  return guarded(__func__, [&] { add_ivalue(ivalue, IValue(val)); });
}

extern "C" AOTITorchError aoti_torch_str_to_ivalue(const char* val, C10IValueHandle* ivalue) {
  return guarded(__func__, [&] {
    ETM_REQUIRE(val, "val is null");
    add_ivalue(ivalue, IValue(std::string(val)));
  });
}

extern "C" AOTITorchError aoti_torch_strlist_to_ivalue(const char** val, int64_t len, C10IValueHandle* ivalue) {
  return guarded(__func__, [&] {
    ETM_REQUIRE(len >= 0 && (val || len == 0), "val is null or len ", len, " is negative");
    std::vector<std::string> strings;
    for (int64_t i = 0; i < len; ++i) {
      ETM_REQUIRE(val[i], "string ", i, " is null");
      strings.emplace_back(val[i]);
    }
    add_ivalue(ivalue, IValue(std::move(strings)));
  });
}

extern "C" AOTITorchError aoti_torch_tensor_to_ivalue(AtenTensorHandle val, C10IValueHandle* ivalue) {
  return guarded(__func__, [&] {
    add_ivalue(ivalue, IValue(std::make_unique<Tensor>(tensor_of(val))));
  });
}

extern "C" AOTITorchError aoti_torch_delete_c10_value_object(C10IValueHandle handle) {
  return guarded(__func__, [&] { ivalues().remove(handle); });
}

extern "C" AOTITorchError aoti_record_function_start(const char* name, IValueMapHandle /*kwargs*/,
                                                     const C10IValueHandle* inputs, const uint64_t n_inputs,
                                                     AtenRecordFunctionHandle* guard) {
  return guarded(__func__, [&] {
    require_out(guard, "guard");
    ETM_REQUIRE(name, "name is null");
    ETM_REQUIRE(inputs || n_inputs == 0, "inputs is null with n_inputs ", n_inputs);
    for (uint64_t i = 0; i < n_inputs; ++i) ivalues().get(inputs[i]);  // each must be live
    auto scope = std::make_unique<RecordFunctionScope>(
        RecordFunctionScope{name, n_inputs, trace::enabled() ? device::host_clock_us() : 0.0});
    *guard = reinterpret_cast<AtenRecordFunctionHandle>(record_functions().add(std::move(scope)));
  });
}

extern "C" AOTITorchError aoti_record_function_end(AtenRecordFunctionHandle guard) {
  return guarded(__func__, [&] {
    const std::unique_ptr<RecordFunctionScope> scope = record_functions().remove(guard);
    if (!trace::enabled()) return;
    trace::span(trace::thread_track(), "record_function", scope->name, scope->start_us,
                device::host_clock_us() - scope->start_us, "\"inputs\": " + std::to_string(scope->inputs));
  });
}
