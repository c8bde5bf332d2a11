// How libetmetal declares its thread-locals: `ETM_THREAD_LOCAL T name;` instead of
// `thread_local T name;`.
//
// They are all the library's own (hidden), so the local-dynamic TLS model applies: a function
// reaches every one it uses with one __tls_get_addr call, where the default model for a shared
// library (global-dynamic) makes a call per variable, about 11 instructions each, and the
// dispatch path touches several per API call. (Not -ftls-model=local-dynamic for the whole
// library: g++ would also apply it to libstdc++'s thread-locals, which std::call_once uses, and
// the link fails. Not TLS descriptors, -mtls-dialect=gnu2: see device/cpu/README.md.)
#pragma once

#if defined(__ELF__) && defined(__GNUC__)
#define ETM_THREAD_LOCAL thread_local __attribute__((tls_model("local-dynamic")))
#else
#define ETM_THREAD_LOCAL thread_local
#endif

namespace etm {

// `&variable` for a thread-local, computed where this is called, once: g++ would otherwise redo
// the TLS lookup at each use after a branch (it treats the address as cheap to recompute).
template <typename T>
inline T* thread_local_address(T& variable) {
  T* address = &variable;
#if defined(__GNUC__)
  __asm__("" : "+r"(address));
#endif
  return address;
}

}  // namespace etm
