// A plain C++ ExecuTorch host: loads a Metal .pte with ExecuTorch's Module API and runs one
// method on float32 inputs read from stdin. Nothing here knows about etmetal: linking
// libetmetal_executorch registers the "MetalBackend" that runs the program's delegates.
//
// Usage: run_pte PROGRAM.pte METHOD   with stdin holding, per input, a line
//   "DIM SIZE_0 ... SIZE_{DIM-1}" followed by the values; prints each output the same way.
// Exits 0 on success, 2 when the method fails to load or run (the error is printed).

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

using executorch::extension::Module;
using executorch::runtime::Error;
using executorch::runtime::EValue;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: run_pte PROGRAM.pte METHOD\n";
    return 1;
  }
  const std::string method = argv[2];
  Module module(argv[1]);
  Error loaded = module.load_method(method);
  if (loaded != Error::Ok) {
    std::printf("load_method failed: error 0x%x\n", static_cast<unsigned>(loaded));
    return 2;
  }
  std::vector<std::vector<float>> storage;
  std::vector<executorch::extension::TensorPtr> tensors;
  int dim = 0;
  while (std::cin >> dim) {
    std::vector<executorch::aten::SizesType> sizes(dim);
    size_t count = 1;
    for (auto& size : sizes) {
      std::cin >> size;
      count *= static_cast<size_t>(size);
    }
    storage.emplace_back(count);
    for (float& value : storage.back()) std::cin >> value;
    tensors.push_back(executorch::extension::from_blob(storage.back().data(), sizes));
  }
  std::vector<EValue> inputs(tensors.begin(), tensors.end());
  auto outputs = module.execute(method, inputs);
  if (!outputs.ok()) {
    std::printf("execute failed: error 0x%x\n", static_cast<unsigned>(outputs.error()));
    return 2;
  }
  for (const EValue& output : *outputs) {
    const auto& tensor = output.toTensor();
    std::printf("%zu", static_cast<size_t>(tensor.dim()));
    for (auto size : tensor.sizes()) std::printf(" %d", static_cast<int>(size));
    const float* values = tensor.const_data_ptr<float>();
    for (ssize_t i = 0; i < tensor.numel(); ++i) std::printf(" %.9g", values[i]);
    std::printf("\n");
  }
  return 0;
}
