#include "model_library.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#if defined(__linux__)
#include <elf.h>
#include <link.h>
#endif

extern "C" void __cxa_finalize(void* dso_handle);

namespace etmetal_executorch {
namespace {

// The one place a model library is opened. A model compiled by etmetal links libetmetal
// (DT_NEEDED); RTLD_DEEPBIND makes its aoti_torch_* calls bind there even when another library
// in the global scope defines some of them (libtorch, loaded RTLD_GLOBAL by a host). A model
// without that dependency resolves them from the global scope (a host linked against
// libetmetal). RTLD_NOW: a function libetmetal lacks fails here, with its name, not at first call.
void* open_model_shared_object(const std::string& path, std::string* error) {
  int flags = RTLD_NOW | RTLD_LOCAL;
#if defined(RTLD_DEEPBIND)
  flags |= RTLD_DEEPBIND;
#endif
  void* handle = dlopen(path.c_str(), flags);
  if (handle == nullptr) {
    const char* message = dlerror();
    *error = message != nullptr ? message : "dlopen failed";
  }
  return handle;
}

bool write_temporary_file(const void* bytes, size_t size, std::string* path, std::string* error) {
  std::error_code ignored;
  std::string directory = std::filesystem::temp_directory_path(ignored).string();
  if (directory.empty()) directory = "/tmp";
  std::string pattern = directory + "/etmetal-model-XXXXXX";
  int fd = mkstemp(pattern.data());
  if (fd < 0) {
    *error = "cannot create a temporary file in " + directory + ": " + std::strerror(errno);
    return false;
  }
  const char* cursor = static_cast<const char*>(bytes);
  size_t left = size;
  while (left > 0) {
    ssize_t written = ::write(fd, cursor, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      *error = "cannot write " + pattern + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(pattern.c_str());
      return false;
    }
    cursor += written;
    left -= static_cast<size_t>(written);
  }
  ::close(fd);
  *path = pattern;
  return true;
}

#if defined(__linux__)
// Offset of the library's hidden `__dso_handle` from its symbol table (.symtab; it is not in
// .dynsym), or 0 when the bytes hold no such symbol.
uint64_t dso_handle_offset(const unsigned char* data, size_t size) {
  if (size < sizeof(Elf64_Ehdr) || std::memcmp(data, ELFMAG, SELFMAG) != 0 ||
      data[EI_CLASS] != ELFCLASS64) {
    return 0;
  }
  Elf64_Ehdr header;
  std::memcpy(&header, data, sizeof header);
  if (header.e_shentsize != sizeof(Elf64_Shdr) || header.e_shoff > size ||
      header.e_shnum > (size - header.e_shoff) / sizeof(Elf64_Shdr)) {
    return 0;
  }
  auto section = [&](size_t index) {
    Elf64_Shdr result;
    std::memcpy(&result, data + header.e_shoff + index * sizeof(Elf64_Shdr), sizeof result);
    return result;
  };
  for (size_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr symbols = section(i);
    if (symbols.sh_type != SHT_SYMTAB || symbols.sh_link >= header.e_shnum) continue;
    Elf64_Shdr strings = section(symbols.sh_link);
    if (symbols.sh_offset > size || symbols.sh_size > size - symbols.sh_offset ||
        strings.sh_offset > size || strings.sh_size > size - strings.sh_offset) {
      return 0;
    }
    for (size_t s = 0; s < symbols.sh_size / sizeof(Elf64_Sym); ++s) {
      Elf64_Sym symbol;
      std::memcpy(&symbol, data + symbols.sh_offset + s * sizeof(Elf64_Sym), sizeof symbol);
      if (symbol.st_name >= strings.sh_size || symbol.st_shndx == SHN_UNDEF) continue;
      const char* name = reinterpret_cast<const char*>(data + strings.sh_offset + symbol.st_name);
      size_t room = strings.sh_size - symbol.st_name;
      if (strnlen(name, room) < room && std::strcmp(name, "__dso_handle") == 0) {
        return symbol.st_value;
      }
    }
  }
  return 0;
}

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

// g++ gives model libraries STB_GNU_UNIQUE symbols, so dlclose never unloads them and their
// static objects (kernel handles that own shader libraries) would be destroyed only at exit,
// from the loader's finalization. __cxa_finalize on the library's __dso_handle destroys them
// now; this needs the handle, which holds its own address.
void* find_dso_handle(void* library, const void* bytes, size_t size) {
  uint64_t offset = dso_handle_offset(static_cast<const unsigned char*>(bytes), size);
  struct link_map* map = nullptr;
  if (offset == 0 || dlinfo(library, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) {
    return nullptr;
  }
  void* address = reinterpret_cast<void*>(map->l_addr + offset);
  return *static_cast<void**>(address) == address ? address : nullptr;
}
#else
// dyld checks a Mach-O's extent itself, and runs a library's static destructors when dlclose
// unloads it.
bool check_elf_extent(const unsigned char*, size_t, std::string*) { return true; }
void* find_dso_handle(void*, const void*, size_t) { return nullptr; }
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
  if (!write_temporary_file(bytes, size, &path, error)) return nullptr;
  std::unique_ptr<ModelLibrary> library(new ModelLibrary());
  std::string open_error;
  library->handle_ = open_model_shared_object(path, &open_error);
  // Loaded (or not), the file is no longer needed: nothing is left behind on any exit path.
  ::unlink(path.c_str());
  if (library->handle_ == nullptr) {
    *error = "cannot load the model library " + label + ": " + open_error;
    return nullptr;
  }
  library->dso_handle_ = find_dso_handle(library->handle_, bytes, size);
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

ModelLibrary::~ModelLibrary() {
  if (handle_ == nullptr) return;
  if (dso_handle_ != nullptr) __cxa_finalize(dso_handle_);
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
