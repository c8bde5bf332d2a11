// A small Objective-C runtime, enough to run native/device/metal/ against the fake Metal on
// Linux without installing one. It implements the GNUstep 2.0 ABI as clang emits it with
// `-fobjc-runtime=gnustep-2.0 -Xclang -fobjc-dispatch-method=legacy` (message sends look the
// method up, then call it: no assembly trampolines), plus what ARC and blocks call:
// reference counts, weak references, autorelease pools, .cxx_construct/.cxx_destruct.
// Not implemented because the fake does not use them: protocols at run time, class aliases,
// +initialize/+load, message forwarding (an unknown selector prints the class and the
// selector, then aborts, as an unrecognized-selector exception would end a Mac test),
// __block variables captured by copied blocks.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unwind.h>
#include <utility>
#include <vector>

namespace {

using IMP = void* (*)(void*, void*, ...);

struct Selector {
  const char* name;  // replaced by the interned name at load, so names compare by address
  const char* types;
};

struct Method {
  IMP imp;
  Selector* selector;
  const char* types;
};

struct MethodList {
  MethodList* next;
  int count;
  int64_t entry_size;
  Method methods[];
};

struct Ivar {
  const char* name;
  const char* type;
  int32_t* offset;
  uint32_t size;
  uint32_t flags;  // bits 3-8: log2 of the alignment
};

struct IvarList {
  int count;
  int64_t entry_size;
  Ivar ivars[];
};

struct Class {
  Class* isa;
  Class* super_class;
  const char* name;
  long version;
  unsigned long info;  // bit 0: metaclass
  long instance_size;  // until resolved: minus the size of the class's own ivars (0: none)
  IvarList* ivars;
  MethodList* methods;
  void* dtable;
  void* reserved[6];
  long abi_version;
  void* properties;
};

struct Category {
  const char* name;
  const char* class_name;
  MethodList* instance_methods;
  MethodList* class_methods;
  void* protocols;
  void* properties;
  void* class_properties;
};

struct LoadInfo {
  uint64_t version;
  Selector* selectors_begin;
  Selector* selectors_end;
  Class** classes_begin;
  Class** classes_end;
  void* class_refs_begin;
  void* class_refs_end;
  Category* categories_begin;
  Category* categories_end;
  void* other_sections[8];
};

// What objc_msg_lookup_sender returns: clang reads the method from the last field.
struct Slot {
  Class* owner;
  Class* cached_for;
  const char* types;
  int version;
  IMP method;
};

struct Object {
  Class* isa;
};

// Reference counts live in a header before each allocated object.
struct alignas(16) ObjectHeader {
  std::atomic<intptr_t> references;
};

constexpr unsigned long kMetaclassBit = 1;

std::mutex& runtime_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<std::string, const char*>& interned_names() {
  static std::map<std::string, const char*> names;
  return names;
}

std::map<std::string, Class*>& classes_by_name() {
  static std::map<std::string, Class*> classes;
  return classes;
}

std::set<Class*>& resolved_classes() {
  static std::set<Class*> resolved;
  return resolved;
}

std::map<std::pair<Class*, const char*>, Slot*>& slot_cache() {
  static std::map<std::pair<Class*, const char*>, Slot*> cache;
  return cache;
}

const char* intern(const char* name) {
  auto& names = interned_names();
  auto found = names.find(name);
  if (found != names.end()) return found->second;
  const char* copy = strdup(name);
  names.emplace(copy, copy);
  return copy;
}

const char* intern_locked(const char* name) {
  std::lock_guard<std::mutex> lock(runtime_mutex());
  return intern(name);
}

[[noreturn]] void fail(const std::string& message) {
  fprintf(stderr, "objc runtime: %s\n", message.c_str());
  abort();
}

void intern_method_list(MethodList* list) {
  for (; list; list = list->next) {
    for (int i = 0; i < list->count; ++i) {
      Selector* selector = list->methods[i].selector;
      selector->name = intern(selector->name);
    }
  }
}

size_t ivar_alignment(const Ivar& ivar) { return size_t{1} << ((ivar.flags >> 3) & 0x3f); }

// Non-fragile ivars: the compiler gave offsets within the class's own ivars; they move
// past the superclass's instance, aligned for the strictest ivar.
void resolve_class(Class* cls) {
  if (resolved_classes().count(cls)) return;
  Class* super_class = cls->super_class;
  if (super_class) resolve_class(super_class);
  Class* root = cls;
  while (root->super_class) root = root->super_class;
  Class* meta = cls->isa;
  meta->isa = root->isa;
  meta->super_class = super_class ? super_class->isa : cls;
  if (cls->instance_size <= 0) {
    size_t base = super_class ? static_cast<size_t>(super_class->instance_size) : 0;
    size_t alignment = 1;
    if (cls->ivars) {
      for (int i = 0; i < cls->ivars->count; ++i)
        alignment = std::max(alignment, ivar_alignment(cls->ivars->ivars[i]));
    }
    base = (base + alignment - 1) / alignment * alignment;
    if (cls->ivars) {
      for (int i = 0; i < cls->ivars->count; ++i) *cls->ivars->ivars[i].offset += int32_t(base);
    }
    cls->instance_size = long(base) - cls->instance_size;
  }
  intern_method_list(cls->methods);
  intern_method_list(meta->methods);
  resolved_classes().insert(cls);
}

void attach_category(Category* category) {
  auto found = classes_by_name().find(category->class_name);
  if (found == classes_by_name().end())
    fail(std::string("category ") + category->name + " of unknown class " + category->class_name);
  Class* cls = found->second;
  auto prepend = [](Class* target, MethodList* list) {
    if (!list) return;
    intern_method_list(list);
    MethodList* last = list;
    while (last->next) last = last->next;
    last->next = target->methods;
    target->methods = list;
  };
  prepend(cls, category->instance_methods);
  prepend(cls->isa, category->class_methods);
}

// Only this class's own methods (.cxx_construct / .cxx_destruct look no further).
IMP own_method(Class* cls, const char* interned_name) {
  for (MethodList* list = cls->methods; list; list = list->next) {
    for (int i = 0; i < list->count; ++i) {
      if (list->methods[i].selector->name == interned_name) return list->methods[i].imp;
    }
  }
  return nullptr;
}

IMP find_method(Class* cls, const char* interned_name) {
  for (; cls; cls = cls->super_class) {
    if (IMP method = own_method(cls, interned_name)) return method;
  }
  return nullptr;
}

void* nil_receiver_method(void*, void*, ...) { return nullptr; }

Slot* lookup_slot(Class* cls, const Selector* selector) {
  std::lock_guard<std::mutex> lock(runtime_mutex());
  const char* name = intern(selector->name);
  auto key = std::make_pair(cls, name);
  auto found = slot_cache().find(key);
  if (found != slot_cache().end()) return found->second;
  IMP method = find_method(cls, name);
  if (!method) {
    bool meta = cls->info & kMetaclassBit;
    fail(std::string(meta ? "+[" : "-[") + cls->name + " " + selector->name +
         "]: unrecognized selector");
  }
  Slot* slot = new Slot{cls, cls, selector->types, 0, method};
  slot_cache().emplace(key, slot);
  return slot;
}

IMP lookup(void* receiver, const char* name) {
  Selector selector{name, nullptr};
  return lookup_slot(static_cast<Object*>(receiver)->isa, &selector)->method;
}

}  // namespace

// Blocks are objects of these three classes (their storage is the class).
extern "C" {
void* _NSConcreteStackBlock[32];
void* _NSConcreteGlobalBlock[32];
void* _NSConcreteMallocBlock[32];
}

namespace {

struct BlockDescriptor {
  unsigned long reserved;
  unsigned long size;
  void (*copy)(void* destination, const void* source);
  void (*dispose)(const void*);
};

struct Block {
  void* isa;
  std::atomic<int> flags;
  std::atomic<int> references;  // the ABI's reserved field; used for heap copies
  void* invoke;
  BlockDescriptor* descriptor;
};

constexpr int kBlockHasCopyDispose = 1 << 25;

bool is_block(const void* object) {
  void* isa = static_cast<const Object*>(object)->isa;
  return isa == _NSConcreteStackBlock || isa == _NSConcreteGlobalBlock ||
         isa == _NSConcreteMallocBlock;
}

void* copy_block(void* pointer) {
  Block* block = static_cast<Block*>(pointer);
  if (block->isa == _NSConcreteGlobalBlock) return block;
  if (block->isa == _NSConcreteMallocBlock) {
    block->references.fetch_add(1);
    return block;
  }
  Block* copy = static_cast<Block*>(malloc(block->descriptor->size));
  memcpy(static_cast<void*>(copy), block, block->descriptor->size);
  copy->isa = _NSConcreteMallocBlock;
  copy->references.store(1);
  if (block->flags.load() & kBlockHasCopyDispose) block->descriptor->copy(copy, block);
  return copy;
}

void release_block(void* pointer) {
  Block* block = static_cast<Block*>(pointer);
  if (block->isa != _NSConcreteMallocBlock) return;
  if (block->references.fetch_sub(1) != 1) return;
  if (block->flags.load() & kBlockHasCopyDispose) block->descriptor->dispose(block);
  free(block);
}

ObjectHeader* header_of(void* object) { return static_cast<ObjectHeader*>(object) - 1; }

// Classes, constant strings and blocks are not counted: only class_createInstance's
// objects carry a header.
Class* constant_string_class();

bool is_counted(void* object) {
  Class* isa = static_cast<Object*>(object)->isa;
  if (isa->info & kMetaclassBit) return false;
  return isa != constant_string_class() && !is_block(object);
}

std::mutex& weak_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::unordered_map<void*, std::set<void**>>& weak_slots() {
  static std::unordered_map<void*, std::set<void**>> slots;
  return slots;
}

using Pool = std::vector<void*>;

// Objects autoreleased outside any pool are released when their thread ends.
struct ThreadPool {
  Pool objects;
  ~ThreadPool();
};

Pool& autorelease_pool() {
  thread_local ThreadPool pool;
  return pool.objects;
}

}  // namespace

extern "C" {

void __objc_load(LoadInfo* info) {
  std::lock_guard<std::mutex> lock(runtime_mutex());
  static std::set<LoadInfo*> loaded;
  if (!loaded.insert(info).second) return;
  for (Selector* selector = info->selectors_begin; selector < info->selectors_end; ++selector) {
    if (selector->name) selector->name = intern(selector->name);
  }
  for (Class** entry = info->classes_begin; entry < info->classes_end; ++entry) {
    if (*entry) classes_by_name()[(*entry)->name] = *entry;
  }
  for (Class** entry = info->classes_begin; entry < info->classes_end; ++entry) {
    if (*entry) resolve_class(*entry);
  }
  for (Category* category = info->categories_begin; category < info->categories_end; ++category) {
    if (category->name) attach_category(category);
  }
}

Slot* objc_msg_lookup_sender(void** receiver, Selector* selector, void*) {
  static Slot nil_slot{nullptr, nullptr, nullptr, 0, nil_receiver_method};
  if (!*receiver) return &nil_slot;
  return lookup_slot(static_cast<Object*>(*receiver)->isa, selector);
}

struct Super {
  void* receiver;
  Class* cls;
};

IMP objc_msg_lookup_super(Super* super, Selector* selector) {
  return lookup_slot(super->cls, selector)->method;
}

void* class_createInstance(Class* cls, size_t extra_bytes) {
  size_t size = sizeof(ObjectHeader) + size_t(cls->instance_size) + extra_bytes;
  auto* header = static_cast<ObjectHeader*>(calloc(1, size));
  if (!header) return nullptr;
  header->references.store(1);
  auto* object = reinterpret_cast<Object*>(header + 1);
  object->isa = cls;
  std::vector<Class*> chain;
  for (Class* c = cls; c; c = c->super_class) chain.push_back(c);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    if (IMP construct = own_method(*it, intern_locked(".cxx_construct"))) construct(object, nullptr);
  }
  return object;
}

void* object_dispose(void* object) {
  if (!object) return nullptr;
  for (Class* c = static_cast<Object*>(object)->isa; c; c = c->super_class) {
    if (IMP destruct = own_method(c, intern_locked(".cxx_destruct"))) destruct(object, nullptr);
  }
  free(header_of(object));
  return nullptr;
}

void* objc_retain(void* object) {
  if (!object) return nullptr;
  if (is_block(object)) return copy_block(object);
  if (is_counted(object)) header_of(object)->references.fetch_add(1);
  return object;
}

void objc_release(void* object) {
  if (!object) return;
  if (is_block(object)) return release_block(object);
  if (!is_counted(object)) return;
  if (header_of(object)->references.fetch_sub(1) != 1) return;
  {
    std::lock_guard<std::mutex> lock(weak_mutex());
    auto found = weak_slots().find(object);
    if (found != weak_slots().end()) {
      for (void** slot : found->second) *slot = nullptr;
      weak_slots().erase(found);
    }
  }
  reinterpret_cast<void (*)(void*, void*)>(lookup(object, "dealloc"))(object, nullptr);
}

void* objc_retainBlock(void* block) { return block ? copy_block(block) : nullptr; }

void* objc_autorelease(void* object) {
  if (object) autorelease_pool().push_back(object);
  return object;
}

void* objc_autoreleasePoolPush() {
  return reinterpret_cast<void*>(autorelease_pool().size());
}

void objc_autoreleasePoolPop(void* marker) {
  Pool& pool = autorelease_pool();
  size_t keep = reinterpret_cast<size_t>(marker);
  while (pool.size() > keep) {
    void* object = pool.back();
    pool.pop_back();
    objc_release(object);
  }
}

void* objc_autoreleaseReturnValue(void* object) { return objc_autorelease(object); }
void* objc_retainAutoreleasedReturnValue(void* object) { return objc_retain(object); }
void* objc_retainAutorelease(void* object) { return objc_autorelease(objc_retain(object)); }
void* objc_retainAutoreleaseReturnValue(void* object) {
  return objc_autorelease(objc_retain(object));
}

void objc_storeStrong(void** location, void* value) {
  value = objc_retain(value);
  void* old = *location;
  *location = value;
  objc_release(old);
}

void* objc_storeWeak(void** location, void* value) {
  std::lock_guard<std::mutex> lock(weak_mutex());
  if (void* old = *location) {
    auto found = weak_slots().find(old);
    if (found != weak_slots().end()) found->second.erase(location);
  }
  if (value && is_counted(value) && header_of(value)->references.load() == 0) value = nullptr;
  *location = value;
  if (value && is_counted(value)) weak_slots()[value].insert(location);
  return value;
}

void* objc_loadWeakRetained(void** location) {
  std::lock_guard<std::mutex> lock(weak_mutex());
  void* object = *location;
  if (!object || !is_counted(object)) return object;
  auto& references = header_of(object)->references;
  intptr_t count = references.load();
  while (count > 0 && !references.compare_exchange_weak(count, count + 1)) {
  }
  return count > 0 ? object : nullptr;
}

void objc_destroyWeak(void** location) { objc_storeWeak(location, nullptr); }

void* objc_getProperty(void* object, void*, ptrdiff_t offset, bool) {
  void* value = *reinterpret_cast<void**>(static_cast<char*>(object) + offset);
  return objc_autorelease(objc_retain(value));
}

void objc_enumerationMutation(void* collection) {
  fail(std::string("a ") + static_cast<Object*>(collection)->isa->name +
       " was mutated while being enumerated");
}

// Objective-C++ frames name this personality; the fake throws only C++ exceptions.
_Unwind_Reason_Code __gxx_personality_v0(int, _Unwind_Action, uint64_t, _Unwind_Exception*,
                                         _Unwind_Context*);
_Unwind_Reason_Code __gnustep_objcxx_personality_v0(int version, _Unwind_Action actions,
                                                    uint64_t exception_class,
                                                    _Unwind_Exception* exception,
                                                    _Unwind_Context* context) {
  return __gxx_personality_v0(version, actions, exception_class, exception, context);
}

extern Class _OBJC_CLASS_NSConstantString __asm__("._OBJC_CLASS_NSConstantString");

}  // extern "C"

namespace {

Class* constant_string_class() { return &_OBJC_CLASS_NSConstantString; }

ThreadPool::~ThreadPool() {
  while (!objects.empty()) {
    void* object = objects.back();
    objects.pop_back();
    objc_release(object);
  }
}

}  // namespace
