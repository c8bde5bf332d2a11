// The threadgroup-memory checks of the kernel sanitizer (ETMETAL_VALIDATE=1): what the group's
// threads did to each byte of their threadgroup memory, and how one access is judged against
// it. Shared by the checker (dispatch_validation.cpp), which keeps the state and reports, and
// the kernels' access hooks (etm_cpu_counters.h), which settle the usual access inline
// (check_threadgroup_inline) and call the checker for everything else. Both sides compile this
// same text (the kernel's copy is embedded in libetmetal), so they agree on the layout.
#pragma once

#include <stdint.h>
#include <string.h>

#include "etm_cpu_kernel_abi.h"

// Kernels compile this with the access instrumentation: its own loads and stores are the
// checker's, not the kernel's.
#define ETM_CPU_CHECKS_INLINE __attribute__((ETM_CPU_NOT_INSTRUMENTED, always_inline)) inline

namespace etm_cpu_checks {

constexpr uint32_t kNoThread = UINT32_MAX;
constexpr uint32_t kSeveralThreads = UINT32_MAX - 1;
constexpr uint16_t kSeveralSimdgroups = UINT16_MAX;
constexpr uint32_t kLanesPerSimdgroup = 32;

// What the group's threads did to one byte of threadgroup memory. Epochs count the
// threadgroup_barriers a thread has passed, plus one (0: not in this group).
// SIMD-group collectives (simdgroup_barrier, simd_sum, simdgroup_store, ...) order the accesses
// of one SIMD group's lanes within an epoch: each access keeps how many its thread had passed.
struct ShadowByte {
  uint32_t write_epoch;
  uint32_t read_epoch;
  uint32_t last_epoch;  // of the last checked access
  uint32_t write_syncs;
  uint32_t read_syncs;  // the most any reader of the epoch had passed
  uint32_t last_syncs;
  uint16_t writer;
  uint16_t reader;
  uint16_t read_simdgroup;  // of the epoch's readers, or kSeveralSimdgroups
  uint16_t last_thread;
  uint8_t written;
  uint8_t several_readers;
};

// An element's bytes are usually accessed together and share one state: a run of them keeps it
// in its first byte's entry (run_length, at most kMaxRun) until an access or an inferred write
// touches part of it. The other bytes of a run are marked kInRun; 0 marks a byte with its own
// state, kUntouched one no check has touched since the group began: its state is all zero,
// whatever its entry holds (a new group marks its bytes, rather than clearing their states).
constexpr uint8_t kInRun = UINT8_MAX;
constexpr uint8_t kUntouched = UINT8_MAX - 1;
constexpr uint64_t kMaxRun = 16;

// The state of the worker's current group that the inline checks read and update (the
// checker's per-worker record starts with it; etm_cpu_validation::worker returns it).
struct WorkerChecks {
  ShadowByte* bytes;                // per byte of the layout
  uint8_t* run_length;              // per byte: a run's length at its first byte, kInRun, kUntouched or 0
  unsigned char* values;            // the arena's bytes as the checks last saw them
  const uint32_t* valid_end;        // per byte: the end of the variable or block holding it (0: none)
  uint64_t threadgroup_bytes;       // the layout, redzones included
  const uint32_t* simd_syncs;       // per thread: SIMD-group collectives passed
  uint32_t thread_count;
  uint32_t barriers;                // threadgroup_barriers the group has passed
  // The last checked store or atomic update, which happens after its check: at the next check
  // (or barrier, or the group's end) its bytes are what it wrote.
  uint64_t pending_begin;
  uint64_t pending_end;
  // That store's race with another thread's write (kNoThread: none), reported once the store
  // has happened and only if it changed a byte (dispatch_validation.cpp).
  uint32_t pending_race_other;
};

// memcmp(a, b, size) == 0 and memcpy(to, from, size), without a library call for the usual
// access sizes.
template <class Word> ETM_CPU_CHECKS_INLINE bool same_word(const unsigned char* a, const unsigned char* b) {
  Word x, y;
  memcpy(&x, a, sizeof x);
  memcpy(&y, b, sizeof y);
  return x == y;
}
ETM_CPU_CHECKS_INLINE bool same_bytes(const unsigned char* a, const unsigned char* b, uint64_t size) {
  switch (size) {
    case 1: return *a == *b;
    case 2: return same_word<uint16_t>(a, b);
    case 4: return same_word<uint32_t>(a, b);
    case 8: return same_word<uint64_t>(a, b);
    default: return memcmp(a, b, size) == 0;
  }
}
ETM_CPU_CHECKS_INLINE void copy_bytes(unsigned char* to, const unsigned char* from, uint64_t size) {
  switch (size) {
    case 0: return;
    case 1: *to = *from; return;
    case 2: memcpy(to, from, 2); return;
    case 4: memcpy(to, from, 4); return;
    case 8: memcpy(to, from, 8); return;
    default: memcpy(to, from, size);
  }
}

ETM_CPU_CHECKS_INLINE uint16_t simdgroup_of(uint32_t thread) {
  return static_cast<uint16_t>(thread / kLanesPerSimdgroup);
}

// An access by `thread`, which has passed `syncs` SIMD-group collectives, comes after one by a
// lane of its own SIMD group that had passed fewer.
ETM_CPU_CHECKS_INLINE bool simd_ordered(uint32_t thread, uint32_t syncs, uint16_t other_simdgroup, uint32_t other_syncs) {
  return simdgroup_of(thread) == other_simdgroup && syncs > other_syncs;
}

// What one access found: a read of bytes never written, or the first thread it races with
// (kNoThread: none; kSeveralThreads: other readers) and whether that thread wrote (else it read).
struct Finding {
  bool uninitialised = false;
  uint32_t other = kNoThread;
  bool other_wrote = false;
};

// What an access by `thread` (`syncs` collectives passed, in `epoch`) finds at a byte, or at a
// run's shared state, before it is applied: a load after another thread's unordered write in
// the epoch, a store after another thread's unordered write or read.
ETM_CPU_CHECKS_INLINE Finding judge(const ShadowByte& s, uint16_t thread, uint32_t epoch, uint32_t syncs, uint32_t kind) {
  Finding finding;
  if (kind == ETM_CPU_ACCESS_ATOMIC) return finding;
  const bool written_by_other = s.write_epoch == epoch && s.writer != thread;
  const bool after_write = written_by_other && !simd_ordered(thread, syncs, simdgroup_of(s.writer), s.write_syncs);
  if (kind == ETM_CPU_ACCESS_LOAD) {
    if (!s.written) {
      finding.uninitialised = true;
    } else if (after_write) {
      finding.other = s.writer;
      finding.other_wrote = true;
    }
  } else if (after_write) {
    finding.other = s.writer;
    finding.other_wrote = true;
  } else if (s.read_epoch == epoch && (s.reader != thread || s.several_readers) &&
             !simd_ordered(thread, syncs, s.read_simdgroup, s.read_syncs)) {
    finding.other = s.reader != thread ? s.reader : kSeveralThreads;
    finding.other_wrote = written_by_other;
  }
  return finding;
}

// The access's mark on the state.
ETM_CPU_CHECKS_INLINE void apply(ShadowByte& s, uint16_t thread, uint32_t epoch, uint32_t syncs, uint32_t kind) {
  s.last_thread = thread;
  s.last_syncs = syncs;
  // What an atomic operation changes is no plain write for the checker's inference to find.
  s.last_epoch = kind == ETM_CPU_ACCESS_ATOMIC ? 0 : epoch;
  if (kind == ETM_CPU_ACCESS_LOAD) {
    if (s.read_epoch != epoch) {
      s.read_epoch = epoch;
      s.reader = thread;
      s.several_readers = 0;
      s.read_simdgroup = simdgroup_of(thread);
      s.read_syncs = syncs;
    } else {
      if (s.reader != thread) s.several_readers = 1;
      if (s.read_simdgroup != simdgroup_of(thread)) s.read_simdgroup = kSeveralSimdgroups;
      if (syncs > s.read_syncs) s.read_syncs = syncs;
    }
    return;
  }
  s.written = 1;
  if (kind == ETM_CPU_ACCESS_ATOMIC) return;
  s.write_epoch = epoch;
  s.write_syncs = syncs;
  s.writer = thread;
}

// A write by `thread` in `epoch`: the thread that makes it a race (another thread wrote or
// read the byte in the same epoch, unordered), kSeveralThreads, or kNoThread.
ETM_CPU_CHECKS_INLINE uint32_t note_write(ShadowByte& s, uint16_t thread, uint32_t epoch, uint32_t syncs) {
  const uint32_t other = judge(s, thread, epoch, syncs, ETM_CPU_ACCESS_STORE).other;
  s.written = 1;
  s.write_epoch = epoch;
  s.write_syncs = syncs;
  s.writer = thread;
  return other;
}

// One checked access to a byte, or to a run's shared state: its finding joins `finding` (the
// first race found is the one reported).
ETM_CPU_CHECKS_INLINE void visit(ShadowByte& s, uint16_t thread, uint32_t epoch, uint32_t syncs, uint32_t kind,
                                 Finding& finding) {
  const Finding found = judge(s, thread, epoch, syncs, kind);
  finding.uninitialised = finding.uninitialised || found.uninitialised;
  if (finding.other == kNoThread) {
    finding.other = found.other;
    finding.other_wrote = found.other_wrote;
  }
  apply(s, thread, epoch, syncs, kind);
}

// Whether the `size` bytes from `run` are all kUntouched (one word compare for the usual sizes).
ETM_CPU_CHECKS_INLINE bool all_untouched(const uint8_t* run, uint64_t size) {
  constexpr uint64_t kPattern = 0x0101010101010101ull * kUntouched;
  switch (size) {
    case 1: return run[0] == kUntouched;
    case 2: { uint16_t w; memcpy(&w, run, 2); return w == static_cast<uint16_t>(kPattern); }
    case 4: { uint32_t w; memcpy(&w, run, 4); return w == static_cast<uint32_t>(kPattern); }
    case 8: { uint64_t w; memcpy(&w, run, 8); return w == kPattern; }
    default:
      for (uint64_t k = 0; k < size; ++k) {
        if (run[k] != kUntouched) return false;
      }
      return true;
  }
}

// The usual access, judged where it happens: a plain load or store by a known thread, inside
// one variable, after the last checked store settled without a race, of bytes that hold what the
// checks last saw, and either one run's or one byte's state or bytes no check touched yet. It
// is applied only if it finds nothing; the rest (and every report) is the checker's, which
// then finds the same state as if this had not run. Returns whether the access was settled.
// `Size` and `Kind` are the hook's constants (Size 0: `any_size`).
template <uint64_t Size, uint32_t Kind>
ETM_CPU_CHECKS_INLINE bool check_threadgroup_inline(WorkerChecks* w, const unsigned char* arena, uint64_t offset,
                                                    uint64_t any_size, uint32_t thread) {
  static_assert(Kind != ETM_CPU_ACCESS_ATOMIC, "atomic accesses are the checker's");
  const uint64_t size = Size ? Size : any_size;
  if (!w || thread >= w->thread_count || offset >= w->threadgroup_bytes) return false;
  const uint64_t valid_end = w->valid_end[offset];
  if (valid_end <= offset || size > valid_end - offset) return false;
  if (w->pending_race_other != kNoThread) return false;
  copy_bytes(w->values + w->pending_begin, arena + w->pending_begin, w->pending_end - w->pending_begin);
  w->pending_begin = w->pending_end = 0;
  if (!same_bytes(w->values + offset, arena + offset, size)) return false;
  uint8_t* run = w->run_length + offset;
  const bool in_place = size > 1 ? run[0] == size : run[0] == 0;
  if (!in_place && (size > kMaxRun || !all_untouched(run, size))) return false;
  ShadowByte& state = w->bytes[offset];
  if (!in_place) state = ShadowByte{};  // an untouched byte's entry is not read before this
  const auto me = static_cast<uint16_t>(thread);
  const uint32_t epoch = w->barriers + 1, syncs = w->simd_syncs[thread];
  const Finding finding = judge(state, me, epoch, syncs, Kind);
  if (finding.uninitialised || finding.other != kNoThread) return false;
  apply(state, me, epoch, syncs, Kind);
  if (!in_place) {
    // Untouched bytes share the zero state: they become a run (a byte, its own state).
    run[0] = size > 1 ? static_cast<uint8_t>(size) : 0;
    for (uint64_t k = 1; k < size; ++k) run[k] = kInRun;
  }
  if (Kind == ETM_CPU_ACCESS_STORE) {
    w->pending_begin = offset;
    w->pending_end = offset + size;
  }
  return true;
}

}  // namespace etm_cpu_checks
