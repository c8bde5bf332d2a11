// Drives native/executorch/model_library.cpp's choice of RTLD_DEEPBIND with stand-in model
// libraries (tests/executorch_integration/test_model_binding.py builds them): a model must
// reach libetmetal's aoti_torch_* functions even when a rival library in the global scope
// defines the same names, and is opened without deep binding when none does.
//
// Arguments: model.so other_model.so plain.so rival.so plain|preloaded. Both models link
// libetmetal and report aoti_torch_dtype_float32() as their input count; the rival's is 99.
#include <dlfcn.h>
#include <elf.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "executorch/model_library.h"

namespace {

int failures = 0;

void expect(bool condition, const char* what) {
  std::printf("%s %s\n", condition ? "ok" : "FAILED", what);
  if (!condition) ++failures;
}

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool deep(const std::string& bytes) {
  return etmetal_executorch::needs_deep_binding(bytes.data(), bytes.size());
}

// The input count the model library reports, which is the float32 dtype code it was bound to.
long bound_dtype_code(const std::string& bytes, const char* label) {
  std::string error;
  auto library = etmetal_executorch::ModelLibrary::load(bytes.data(), bytes.size(), label, &error);
  if (!library) {
    std::printf("load failed: %s\n", error.c_str());
    return -1;
  }
  size_t count = 0;
  library->api().num_inputs(nullptr, &count);
  return static_cast<long>(count);
}

}  // namespace

// Run once plainly, where the rival, dlopen'ed RTLD_GLOBAL, comes after libetmetal in the
// global scope (so libetmetal's definitions win), and once with the rival in LD_PRELOAD,
// ahead of libetmetal ("preloaded").
int main(int argc, char** argv) {
  if (argc != 6) return 2;
  const std::string model = read_file(argv[1]), other_model = read_file(argv[2]);
  const std::string plain = read_file(argv[3]);
  const bool preloaded = std::strcmp(argv[5], "preloaded") == 0;

  if (preloaded) {
    expect(deep(model), "a rival ahead of libetmetal in the global scope asks for deep binding");
    expect(!deep(plain), "the rival does not concern a library importing no runtime names");
    expect(bound_dtype_code(model, "model") == 6, "the deep-bound model calls libetmetal");
    return failures == 0 ? 0 : 1;
  }
  expect(!deep(model), "a model is opened plainly when only libetmetal defines its names");
  expect(!deep(plain), "a library importing no runtime names is opened plainly");
  expect(bound_dtype_code(model, "model") == 6, "the plainly opened model calls libetmetal");

  std::string no_sections = model;
  Elf64_Ehdr header;
  std::memcpy(&header, no_sections.data(), sizeof header);
  header.e_shoff = 0;
  header.e_shnum = 0;
  std::memcpy(&no_sections[0], &header, sizeof header);
  expect(deep(no_sections), "a library whose symbols cannot be read is bound deeply");

  if (dlopen(argv[4], RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::printf("cannot load the rival: %s\n", dlerror());
    return 1;
  }
  expect(!deep(other_model), "a rival behind libetmetal in the global scope does not matter");
  expect(bound_dtype_code(other_model, "other model") == 6,
         "with the rival behind libetmetal the plainly opened model calls libetmetal");
  return failures == 0 ? 0 : 1;
}
