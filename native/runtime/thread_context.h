// What the calling thread keeps between API calls, in one thread-local: an API call on the
// dispatch path reaches all of it with one TLS lookup (`ThreadContext& context =
// this_thread_context();`, then passes it on), where separate thread-locals cost a
// __tls_get_addr call each (about 11 instructions). Trivially constructed and destroyed: no
// guard, and it stays readable while other thread-locals are destroyed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/tls_model.h"

namespace etm {

class Stream;

// A remembered handle lookup (abi/handles.h, LookupCache): valid while its registry's
// generation has not moved.
struct HandleLookup {
  const void* handle = nullptr;
  void* object = nullptr;
  uint64_t generation = 0;
};

struct ThreadContext {
  // The thread's stream once Runtime::current_stream has made it; null again once the thread's
  // stream is destroyed (thread exit).
  Stream* stream = nullptr;
  // Recent lookups, a table per handle registry (abi/handles.h), indexed by the handle's low
  // bits.
  static constexpr size_t kLookupTables = 8;
  static constexpr size_t kLookupsPerTable = 8;
  HandleLookup lookups[kLookupTables][kLookupsPerTable];
};

inline ETM_THREAD_LOCAL ThreadContext thread_context;

// The calling thread's context, for a call that passes it on: one TLS lookup.
inline ThreadContext& this_thread_context() { return *thread_local_address(thread_context); }

}  // namespace etm
