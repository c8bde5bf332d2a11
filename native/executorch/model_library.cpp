#include "model_library.h"

#include <etmetal/etmetal.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <vector>

#if defined(__linux__)
#include <elf.h>
#endif

namespace etmetal_executorch {
namespace {

// The one place a model library is opened. A model compiled by etmetal links libetmetal
// (DT_NEEDED), and RTLD_LOCAL resolves its aoti_torch_* calls in the global scope first, then
// in its own dependencies. When the global scope holds another provider of a name the model
// needs (libtorch, loaded RTLD_GLOBAL by a host), RTLD_DEEPBIND puts the model's dependencies
// first; it is not used otherwise, since a deep-bound library also bypasses interposed
// allocators and sanitizers (the ASan runtime refuses to load one at all). A model without
// that dependency resolves the names from the global scope (a host linked against libetmetal).
// RTLD_NOW: a function libetmetal lacks fails here, with its name, not at first call.
void* open_model_shared_object(const std::string& path, bool deep, std::string* error) {
  int flags = RTLD_NOW | RTLD_LOCAL;
#if defined(RTLD_DEEPBIND)
  if (deep) flags |= RTLD_DEEPBIND;
#else
  (void)deep;  // Mach-O binds each name to the library recorded at link time
#endif
  void* handle = dlopen(path.c_str(), flags);
  if (handle == nullptr) {
    const char* message = dlerror();
    *error = message != nullptr ? message : "dlopen failed";
  }
  return handle;
}

// Model libraries are written once per distinct content into one folder per process, and
// kept there until it ends. Loading a program again then opens a library the loader still has
// (it matches loaded libraries by path) instead of mapping another copy: a model library stays
// loaded while any thread that ran it lives, since its thread_local destructors pin it.
class LibraryFolder {
 public:
  static LibraryFolder& get() {
    static LibraryFolder folder;
    return folder;
  }

  // The path of a file holding exactly `bytes`, written if this process has none yet.
  bool file_for(const void* bytes, size_t size, std::string* path, std::string* error) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (folder_.empty() && !create(error)) return false;
    const std::string stem = folder_ + "/" + content_name(bytes, size);
    for (int variant = 0;; ++variant) {  // a different library whose name collides: next name
      const std::string candidate = stem + (variant == 0 ? "" : "-" + std::to_string(variant)) + ".so";
      if (!std::filesystem::exists(candidate)) {
        if (!write_file(candidate, bytes, size, error)) return false;
        *path = candidate;
        return true;
      }
      if (holds(candidate, bytes, size)) {
        *path = candidate;
        return true;
      }
    }
  }

  ~LibraryFolder() {
    std::error_code ignored;
    if (!folder_.empty()) std::filesystem::remove_all(folder_, ignored);
  }

 private:
  bool create(std::string* error) {
    std::error_code ignored;
    std::string directory = std::filesystem::temp_directory_path(ignored).string();
    if (directory.empty()) directory = "/tmp";
    std::string pattern = directory + "/etmetal-models-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      *error = "cannot create a folder in " + directory + ": " + std::strerror(errno);
      return false;
    }
    folder_ = pattern;
    return true;
  }

  // FNV-1a over the bytes, with the size; collisions are caught by comparing contents.
  static std::string content_name(const void* bytes, size_t size) {
    uint64_t hash = 1469598103934665603ull;
    const unsigned char* data = static_cast<const unsigned char*>(bytes);
    for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 1099511628211ull;
    char name[48];
    std::snprintf(name, sizeof name, "%016llx-%zu", static_cast<unsigned long long>(hash), size);
    return name;
  }

  static bool holds(const std::string& path, const void* bytes, size_t size) {
    std::ifstream in(path, std::ios::binary);
    std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return contents.size() == size && std::memcmp(contents.data(), bytes, size) == 0;
  }

  // Written under another name and renamed, so the loader never sees part of a library.
  static bool write_file(const std::string& path, const void* bytes, size_t size, std::string* error) {
    const std::string partial = path + ".partial";
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
    out.close();
    if (!out || std::rename(partial.c_str(), path.c_str()) != 0) {
      *error = "cannot write " + path + ": " + std::strerror(errno);
      ::unlink(partial.c_str());
      return false;
    }
    return true;
  }

  std::mutex mutex_;
  std::string folder_;
};

#if defined(__linux__)
// The loader maps a truncated library without complaint and faults on first use of a missing
// page, so the bytes must hold every segment and table the headers promise.
bool check_elf_extent(const unsigned char* data, size_t size, std::string* error) {
  if (size < sizeof(Elf64_Ehdr) || std::memcmp(data, ELFMAG, SELFMAG) != 0) {
    *error = "not an ELF shared library";
    return false;
  }
  if (data[EI_CLASS] != ELFCLASS64) {
    *error = "not a 64-bit ELF library";
    return false;
  }
  Elf64_Ehdr header;
  std::memcpy(&header, data, sizeof header);
  auto fits = [size](uint64_t offset, uint64_t count, uint64_t entry) {
    return offset <= size && (entry == 0 || count <= (size - offset) / entry);
  };
  if (header.e_phentsize != sizeof(Elf64_Phdr) ||
      !fits(header.e_phoff, header.e_phnum, sizeof(Elf64_Phdr)) ||
      !fits(header.e_shoff, header.e_shnum, header.e_shentsize)) {
    *error = "truncated library (its header tables extend past " + std::to_string(size) +
             " bytes)";
    return false;
  }
  for (size_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment;
    std::memcpy(&segment, data + header.e_phoff + i * sizeof(Elf64_Phdr), sizeof segment);
    if (segment.p_type == PT_LOAD && !fits(segment.p_offset, segment.p_filesz, 1)) {
      *error = "truncated library (a segment extends past " + std::to_string(size) + " bytes)";
      return false;
    }
  }
  return true;
}

// The names of the undefined symbols in the library's dynamic symbol table. False when the
// table cannot be found (no section headers) or does not fit in the bytes.
bool undefined_dynamic_symbols(const unsigned char* data, size_t size,
                               std::vector<std::string>* names) {
  Elf64_Ehdr header;
  std::memcpy(&header, data, sizeof header);  // check_elf_extent has checked the tables fit
  if (header.e_shentsize != sizeof(Elf64_Shdr)) return false;
  auto section = [&](size_t index) {
    Elf64_Shdr entry;
    std::memcpy(&entry, data + header.e_shoff + index * sizeof(Elf64_Shdr), sizeof entry);
    return entry;
  };
  for (size_t i = 0; i < header.e_shnum; ++i) {
    const Elf64_Shdr symbols = section(i);
    if (symbols.sh_type != SHT_DYNSYM) continue;
    if (symbols.sh_link >= header.e_shnum || symbols.sh_offset > size ||
        symbols.sh_size > size - symbols.sh_offset) {
      return false;
    }
    const Elf64_Shdr strings = section(symbols.sh_link);
    if (strings.sh_offset > size || strings.sh_size > size - strings.sh_offset) return false;
    const char* table = reinterpret_cast<const char*>(data + strings.sh_offset);
    for (size_t k = 0; k < symbols.sh_size / sizeof(Elf64_Sym); ++k) {
      Elf64_Sym symbol;
      std::memcpy(&symbol, data + symbols.sh_offset + k * sizeof(Elf64_Sym), sizeof symbol);
      if (symbol.st_shndx != SHN_UNDEF || symbol.st_name >= strings.sh_size) continue;
      const char* name = table + symbol.st_name;
      if (std::memchr(name, '\0', strings.sh_size - symbol.st_name) == nullptr) return false;
      names->emplace_back(name);
    }
    return true;
  }
  return false;
}

// The object that defines `address` (its load base), or null.
const void* defining_object(const void* address) {
  Dl_info info;
  if (address == nullptr || dladdr(address, &info) == 0) return nullptr;
  return info.dli_fbase;
}

bool is_runtime_symbol(const std::string& name) {
  for (const char* prefix : {"aoti_torch_", "etmetal_", "metal_"}) {
    if (name.compare(0, std::strlen(prefix), prefix) == 0) return true;
  }
  return false;
}

#else
// dyld checks a Mach-O's extent itself.
bool check_elf_extent(const unsigned char*, size_t, std::string*) { return true; }
#endif


template <typename Function>
bool resolve(void* library, const char* name, Function* slot, bool required, std::string* error) {
  *slot = reinterpret_cast<Function>(dlsym(library, name));
  if (*slot == nullptr && required) {
    *error = std::string("the model library does not export ") + name;
    return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<ModelLibrary> ModelLibrary::load(const void* bytes, size_t size,
                                                 const std::string& label, std::string* error) {
  std::string problem;
  if (!check_elf_extent(static_cast<const unsigned char*>(bytes), size, &problem)) {
    *error = "cannot load the model library " + label + ": " + problem;
    return nullptr;
  }
  std::string path;
  if (!LibraryFolder::get().file_for(bytes, size, &path, error)) return nullptr;
  std::unique_ptr<ModelLibrary> library(new ModelLibrary());
  std::string open_error;
  library->handle_ = open_model_shared_object(
      path, needs_deep_binding(bytes, size), &open_error);
  if (library->handle_ == nullptr) {
    *error = "cannot load the model library " + label + ": " + open_error;
    return nullptr;
  }
  ContainerApi& api = library->api_;
  void* handle = library->handle_;
  if (!resolve(handle, "AOTInductorModelContainerCreateWithDevice", &api.create_with_device,
               true, error) ||
      !resolve(handle, "AOTInductorModelContainerDelete", &api.destroy, true, error) ||
      !resolve(handle, "AOTInductorModelContainerGetNumInputs", &api.num_inputs, true, error) ||
      !resolve(handle, "AOTInductorModelContainerGetNumOutputs", &api.num_outputs, true,
               error) ||
      !resolve(handle, "AOTInductorModelContainerGetConstantsBlobSize",
               &api.constants_blob_size, false, error) ||
      !resolve(handle, "AOTInductorModelContainerRun", &api.run, true, error) ||
      !resolve(handle, "AOTInductorModelUpdateConstantsFromBlob",
               &api.update_constants_from_blob, true, error) ||
      !resolve(handle, "AOTInductorGetLastError", &api.last_error, false, error)) {
    *error = label + ": " + *error;
    return nullptr;
  }
  return library;
}

bool needs_deep_binding(const void* bytes, size_t size) {
#if defined(__linux__)
  const auto* data = static_cast<const unsigned char*>(bytes);
  std::string ignored;
  std::vector<std::string> undefined;
  if (!check_elf_extent(data, size, &ignored) ||
      !undefined_dynamic_symbols(data, size, &undefined)) {
    return true;  // cannot tell: keep the model's own dependencies first
  }
  const void* runtime = defining_object(reinterpret_cast<const void*>(&etmetal_last_error));
  for (const std::string& name : undefined) {
    if (!is_runtime_symbol(name)) continue;
    const void* owner = defining_object(dlsym(RTLD_DEFAULT, name.c_str()));
    if (owner != nullptr && owner != runtime) return true;
  }
  return false;
#else
  (void)bytes;
  (void)size;
  return false;
#endif
}

ModelLibrary::~ModelLibrary() {
  if (handle_ == nullptr) return;
  dlclose(handle_);
}

std::string ModelLibrary::last_error() const {
  const char* message = nullptr;
  if (api_.last_error == nullptr || api_.last_error(&message) != 0 || message == nullptr) {
    return "";
  }
  return message;
}

}  // namespace etmetal_executorch
