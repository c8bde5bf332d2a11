// Functions of torch's shim.h that need libtorch's dispatcher, fbgemm or CUDA
// (etmetal/aoti_shim_unavailable.h): each fails with a message naming it and saying why.
#include <string>

#include "abi/guard.h"
#include "etmetal/aoti_shim_unavailable.h"

using etm::abi::guarded_encoding;

namespace {

AOTITorchError unavailable(const char* function, const char* why) {
  return guarded_encoding(function, [&] {
    throw etm::Error(etm::concat("not available in etmetal: ", why));
  });
}

constexpr const char* kLibrary =
    "registering ops needs libtorch's dispatcher (torch::Library), which etmetal does not have; "
    "give a custom op a C shim through etmetal_py.ops instead";
constexpr const char* kFbgemm =
    "fbgemm's packed linear layers exist only in torch's x86 CPU backend; compile the model for "
    "mps without them (they come from a CPU quantization or fp16 prepacking pass)";
constexpr const char* kCuda = "there is no CUDA device; etmetal runs models compiled for mps";

}  // namespace

extern "C" AOTITorchError aoti_torch_library_init_impl(const char*, const char*, const char*, uint32_t,
                                                       TorchLibraryHandle*) {
  return unavailable(__func__, kLibrary);
}
extern "C" AOTITorchError aoti_torch_library_init_def(const char*, const char*, uint32_t, TorchLibraryHandle*) {
  return unavailable(__func__, kLibrary);
}
extern "C" AOTITorchError aoti_torch_library_init_fragment(const char*, const char*, uint32_t,
                                                           TorchLibraryHandle*) {
  return unavailable(__func__, kLibrary);
}
extern "C" AOTITorchError aoti_torch_library_impl(TorchLibraryHandle, const char*,
                                                  void (*)(StableIValue*, uint64_t, uint64_t)) {
  return unavailable(__func__, kLibrary);
}
extern "C" AOTITorchError aoti_torch_library_def(TorchLibraryHandle, const char*) {
  return unavailable(__func__, kLibrary);
}
extern "C" AOTITorchError aoti_torch_delete_library_object(TorchLibraryHandle) {
  return unavailable(__func__, kLibrary);
}

extern "C" AOTITorchError aoti_torch_cpu_wrapped_fbgemm_pack_gemm_matrix_fp16(AtenTensorHandle, AtenTensorHandle*) {
  return unavailable(__func__, kFbgemm);
}
extern "C" AOTITorchError aoti_torch_cpu__wrapped_linear_prepack(AtenTensorHandle, AtenTensorHandle, AtenTensorHandle,
                                                                 AtenTensorHandle, AtenTensorHandle*) {
  return unavailable(__func__, kFbgemm);
}
extern "C" AOTITorchError aoti_torch_cpu_wrapped_fbgemm_linear_fp16_weight(AtenTensorHandle, AtenTensorHandle,
                                                                           AtenTensorHandle, int64_t,
                                                                           AtenTensorHandle*) {
  return unavailable(__func__, kFbgemm);
}
extern "C" AOTITorchError aoti_torch_cpu__wrapped_quantized_linear_prepacked(AtenTensorHandle, AtenTensorHandle,
                                                                             AtenTensorHandle, AtenTensorHandle,
                                                                             AtenTensorHandle, AtenTensorHandle,
                                                                             int64_t, AtenTensorHandle*) {
  return unavailable(__func__, kFbgemm);
}

extern "C" void aoti_torch_save_tensor_handle(AtenTensorHandle, const char* tensor_name, const char*,
                                              const char*) {
  const std::string why = etm::concat(
      "cannot save ", tensor_name ? tensor_name : "(unnamed tensor)",
      ": torch.save's format needs libtorch; use the printing modes of "
      "debug_intermediate_value_printer (\"2\", \"3\") instead");
  unavailable(__func__, why.c_str());
}

extern "C" AOTITorchError aoti_torch_create_cuda_guard(int32_t, CUDAGuardHandle*) {
  return unavailable(__func__, kCuda);
}
extern "C" AOTITorchError aoti_torch_delete_cuda_guard(CUDAGuardHandle) { return unavailable(__func__, kCuda); }
extern "C" AOTITorchError aoti_torch_cuda_guard_set_index(CUDAGuardHandle, int32_t) {
  return unavailable(__func__, kCuda);
}
extern "C" AOTITorchError aoti_torch_create_cuda_stream_guard(void*, int32_t, CUDAStreamGuardHandle*) {
  return unavailable(__func__, kCuda);
}
extern "C" AOTITorchError aoti_torch_delete_cuda_stream_guard(CUDAStreamGuardHandle) {
  return unavailable(__func__, kCuda);
}
extern "C" AOTITorchError aoti_torch_get_current_cuda_stream(int32_t, void**) { return unavailable(__func__, kCuda); }
extern "C" AOTITorchError aoti_torch_cuda_caching_allocator_raw_alloc(uint64_t, void**) {
  return unavailable(__func__, kCuda);
}
extern "C" AOTITorchError aoti_torch_cuda_caching_allocator_raw_delete(void*) { return unavailable(__func__, kCuda); }
