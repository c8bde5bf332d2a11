// Advanced indexing (ATen's index.Tensor and index_put_): self's dimensions split into plain
// ones (no index tensor) and indexed ones, whose index tensors broadcast to one shape. A
// (plain coordinate, broadcast position) pair names one element of the indexing result; the
// result (gather) or the values (put) are addressed through their own strides for both parts.
//   index_gather_<size>        one thread per result element;
//   index_put_<size>           one thread per result element, duplicates: one of the writes wins;
//   index_put_accumulate_<T>   one thread per plain coordinate, walking every broadcast position in
//                              order: duplicate indices never meet in two threads, so the sum is
//                              race-free and deterministic (CPU order). The CPU shape, and the GPU
//                              shape for few positions.
//   index_put_accumulate_keys_<K>, then ops::sort_bounded_keys (ops::sort for int64 keys), then
//   index_put_accumulate_sorted_<T>: the GPU shape for many positions, the same sums with no
//                              thread walking more than its own run of duplicates.
// An index outside [-size, size) is recorded in `fault` (index number + 1, value low and high
// words) and its element is skipped.
//
// scatter / scatter_reduce (ATen semantics): out[..., index[i], ...] (op)= src[i] along `dim`.
// One thread per line of index along dim, walking the line in order: two lines differ in a
// coordinate other than dim, so they never reach the same element of out; the reductions are
// race-free and sum in index order, as ATen's CPU kernel does.
// (The CPU shape, and the GPU shape for short lines; long lines in the GPU shape: scatter_keys,
// ops::sort_bounded_keys of each line, then scatter_sorted: a thread per run of equal
// indices, the same results.)
// Without include_self, the elements a line reaches first become the reduction's identity.
// For mean, `counts` (int32, out's shape, zero on entry) counts the contributions; the line
// divides each element it reached once, and sets its count back to zero.
// An index outside [0, out.size(dim)) is recorded in `fault` (1, value low and high words) and
// its element is skipped.
//
// embedding_bag (ATen's _embedding_bag, the outputs a GPU backend gives): bag b reduces the
// weight rows indices[offsets[b] .. end of bag) by sum (optionally scaled per sample), mean or
// max; indices equal to padding_idx take no part. One thread per (bag, feature), float
// accumulation; feature 0's thread also writes its bag's offset2bag entries and bag_size.
// Empty bags give zeros (max_indices -1). An index outside [0, rows) is recorded in `fault`
// (1, value low and high words) and skipped. Indices outside every bag keep offset2bag 0.
#include <metal_stdlib>
using namespace metal;
#include "params/indexing.h"

struct IndexBuffers {
  const device int* at[kIndexingMaxDims];
};

inline long read_index(const device int* index, bool is_long, long offset) {
  return is_long ? reinterpret_cast<const device long*>(index)[offset] : long(index[offset]);
}

inline void record_fault(device atomic_int* fault, uint k, long value) {
  int seen = 0;
  // Claim the record once; a weak exchange may fail spuriously, so retry while unclaimed.
  while (!atomic_compare_exchange_weak_explicit(&fault[0], &seen, int(k) + 1, memory_order_relaxed,
                                                memory_order_relaxed)) {
    if (seen != 0) return;
  }
  atomic_store_explicit(&fault[1], int(uint(ulong(value) & 0xffffffffUL)), memory_order_relaxed);
  atomic_store_explicit(&fault[2], int(uint(ulong(value) >> 32)), memory_order_relaxed);
}

// Offsets in self and in the other tensor (result or values) of plain coordinate `plain`.
inline void plain_offsets(constant IndexParams& p, uint plain, thread long& self_offset,
                          thread long& other_offset) {
  self_offset = 0;
  other_offset = 0;
  for (int d = int(p.plain_dims) - 1; d >= 0; --d) {
    const long c = long(plain % p.plain_sizes[d]);
    plain /= p.plain_sizes[d];
    self_offset += c * p.plain_self_strides[d];
    other_offset += c * p.plain_other_strides[d];
  }
}

// The other tensor's offset of broadcast position `position`, and its coordinates.
inline long broadcast_offset(constant IndexParams& p, uint position, thread uint* coordinates) {
  long other_offset = 0;
  for (int j = int(p.broadcast_dims) - 1; j >= 0; --j) {
    coordinates[j] = position % p.broadcast_sizes[j];
    position /= p.broadcast_sizes[j];
    other_offset += long(coordinates[j]) * p.broadcast_other_strides[j];
  }
  return other_offset;
}

// The self offset the indices select at broadcast `coordinates`; false (and a fault recorded)
// when an index is out of range.
inline bool indexed_offset(constant IndexParams& p, thread const IndexBuffers& buffers,
                           thread const uint* coordinates, device atomic_int* fault,
                           thread long& self_offset) {
  self_offset = 0;
  for (uint k = 0; k < p.indices; ++k) {
    long offset = 0;
    for (uint j = 0; j < p.broadcast_dims; ++j) offset += long(coordinates[j]) * p.index_strides[k][j];
    const long value = read_index(buffers.at[k], (p.long_indices >> k) & 1u, offset);
    const long wrapped = value < 0 ? value + p.indexed_sizes[k] : value;
    if (wrapped < 0 || wrapped >= p.indexed_sizes[k]) {
      record_fault(fault, k, value);
      return false;
    }
    self_offset += wrapped * p.indexed_self_strides[k];
  }
  return true;
}

// Offsets in self and in the other tensor (result or values) of the pair; false (and a fault
// recorded) when an index is out of range.
inline bool locate(constant IndexParams& p, thread const IndexBuffers& buffers, uint plain,
                   uint position, device atomic_int* fault, thread long& self_offset,
                   thread long& other_offset) {
  plain_offsets(p, plain, self_offset, other_offset);
  uint coordinates[kIndexingMaxDims];
  other_offset += broadcast_offset(p, position, coordinates);
  long indexed;
  if (!indexed_offset(p, buffers, coordinates, fault, indexed)) return false;
  self_offset += indexed;
  return true;
}

#define INDEX_BUFFER_PARAMS                                                                        \
  device atomic_int *fault [[buffer(2)]], constant IndexParams &p [[buffer(3)]],                   \
      const device int *i0 [[buffer(4)]], const device int *i1 [[buffer(5)]],                      \
      const device int *i2 [[buffer(6)]], const device int *i3 [[buffer(7)]],                      \
      const device int *i4 [[buffer(8)]], const device int *i5 [[buffer(9)]],                      \
      const device int *i6 [[buffer(10)]], const device int *i7 [[buffer(11)]],                    \
      const device int *i8 [[buffer(12)]], uint t [[thread_position_in_grid]]

#define INDEX_BUFFERS {{i0, i1, i2, i3, i4, i5, i6, i7, i8}}

// Elements are moved as unsigned integers of their size: any dtype of that size.
template <typename T>
kernel void index_gather(const device T* self [[buffer(0)]], device T* out [[buffer(1)]],
                         INDEX_BUFFER_PARAMS) {
  const IndexBuffers buffers = INDEX_BUFFERS;
  long self_offset, out_offset;
  if (locate(p, buffers, t / p.broadcast_numel, t % p.broadcast_numel, fault, self_offset, out_offset)) {
    out[out_offset] = self[self_offset];
  }
}

template <typename T>
kernel void index_put(device T* self [[buffer(0)]], const device T* values [[buffer(1)]],
                      INDEX_BUFFER_PARAMS) {
  const IndexBuffers buffers = INDEX_BUFFERS;
  long self_offset, values_offset;
  if (locate(p, buffers, t / p.broadcast_numel, t % p.broadcast_numel, fault, self_offset, values_offset)) {
    self[self_offset] = values[values_offset];
  }
}

// Sums round to T after each addition, as ATen's CPU kernel does; bool sums are "or".
template <typename T> inline T accumulate(T a, T b) { return T(float(a) + float(b)); }
template <> inline float accumulate(float a, float b) { return a + b; }
template <> inline long accumulate(long a, long b) { return long(ulong(a) + ulong(b)); }
template <> inline int accumulate(int a, int b) { return int(uint(a) + uint(b)); }
template <> inline short accumulate(short a, short b) { return short(a + b); }
template <> inline char accumulate(char a, char b) { return char(a + b); }
template <> inline uchar accumulate(uchar a, uchar b) { return uchar(a + b); }
template <> inline bool accumulate(bool a, bool b) { return a || b; }

template <typename T>
kernel void index_put_accumulate(device T* self [[buffer(0)]], const device T* values [[buffer(1)]],
                                 INDEX_BUFFER_PARAMS) {
  const IndexBuffers buffers = INDEX_BUFFERS;
  for (uint position = 0; position < p.broadcast_numel; ++position) {
    long self_offset, values_offset;
    if (locate(p, buffers, t, position, fault, self_offset, values_offset)) {
      self[self_offset] = accumulate(self[self_offset], values[values_offset]);
    }
  }
}

// The sorted form (index_put_accumulate_keys, then a sort, then this): `keys` holds every
// broadcast position's key (the self offset its indices select, -1 where one is out of range)
// sorted stably, so equal keys keep position order, and `positions` where each came from (both
// int64 with long_keys, else int32: ops::sort or ops::sort_bounded_keys). One thread per
// (kSortedPlainRun plain coordinates, kSortedKeyRun sorted keys): for each run of equal keys
// that starts among its keys, it adds the run's values in position order (the in-order
// kernel's sums), walking past its own keys when the run does.
template <typename T>
kernel void index_put_accumulate_sorted(device T* self [[buffer(0)]], const device T* values [[buffer(1)]],
                                        constant IndexParams& p [[buffer(2)]],
                                        const device int* keys [[buffer(3)]],
                                        const device int* positions [[buffer(4)]],
                                        constant uint& long_keys [[buffer(5)]],
                                        uint2 t [[thread_position_in_grid]]) {
  const uint first = t.x * kSortedPlainRun, plains = min(kSortedPlainRun, p.plain_numel - first);
  long self_offsets[kSortedPlainRun], values_offsets[kSortedPlainRun];
  for (uint c = 0; c < plains; ++c) plain_offsets(p, first + c, self_offsets[c], values_offsets[c]);
  const uint count = p.broadcast_numel;
  uint s = t.y * kSortedKeyRun;
  const uint end = min(s + kSortedKeyRun, count);
  long previous = s > 0 ? read_index(keys, long_keys, s - 1) : -1;
  long key = read_index(keys, long_keys, s);
  while (s < end) {
    if (key < 0 || key == previous) {  // out of range, or a run that started before these keys
      previous = key;
      key = ++s < end ? read_index(keys, long_keys, s) : -1;
      continue;
    }
    T sums[kSortedPlainRun];
    for (uint c = 0; c < plains; ++c) sums[c] = self[self_offsets[c] + key];
    long next;
    do {
      uint coordinates[kIndexingMaxDims];
      const long position_offset = broadcast_offset(p, uint(read_index(positions, long_keys, s)), coordinates);
      for (uint c = 0; c < plains; ++c) sums[c] = accumulate(sums[c], values[values_offsets[c] + position_offset]);
      next = ++s < count ? read_index(keys, long_keys, s) : -1;
    } while (next == key);
    for (uint c = 0; c < plains; ++c) self[self_offsets[c] + key] = sums[c];
    previous = key;
    key = next;
  }
}

// One thread per broadcast position: its key for index_put_accumulate_sorted.
template <typename K>
kernel void index_put_accumulate_keys(device K* keys [[buffer(0)]], INDEX_BUFFER_PARAMS) {
  const IndexBuffers buffers = INDEX_BUFFERS;
  uint coordinates[kIndexingMaxDims];
  broadcast_offset(p, t, coordinates);
  long self_offset;
  keys[t] = indexed_offset(p, buffers, coordinates, fault, self_offset) ? K(self_offset) : K(-1);
}

template [[host_name("index_put_accumulate_keys_int")]] kernel void index_put_accumulate_keys<int>(
    device int*, device atomic_int*, constant IndexParams&, const device int*, const device int*,
    const device int*, const device int*, const device int*, const device int*, const device int*,
    const device int*, const device int*, uint);
template [[host_name("index_put_accumulate_keys_long")]] kernel void index_put_accumulate_keys<long>(
    device long*, device atomic_int*, constant IndexParams&, const device int*, const device int*,
    const device int*, const device int*, const device int*, const device int*, const device int*,
    const device int*, const device int*, uint);

#define INSTANTIATE_MOVES(T, size)                                                                 \
  template [[host_name("index_gather_" #size)]] kernel void index_gather<T>(                      \
      const device T*, device T*, device atomic_int*, constant IndexParams&, const device int*,    \
      const device int*, const device int*, const device int*, const device int*,                 \
      const device int*, const device int*, const device int*, const device int*, uint);          \
  template [[host_name("index_put_" #size)]] kernel void index_put<T>(                            \
      device T*, const device T*, device atomic_int*, constant IndexParams&, const device int*,    \
      const device int*, const device int*, const device int*, const device int*,                 \
      const device int*, const device int*, const device int*, const device int*, uint);

INSTANTIATE_MOVES(uchar, 1)
INSTANTIATE_MOVES(ushort, 2)
INSTANTIATE_MOVES(uint, 4)
INSTANTIATE_MOVES(ulong, 8)

#define INSTANTIATE_ACCUMULATE(T, name)                                                            \
  template [[host_name("index_put_accumulate_" #name)]] kernel void index_put_accumulate<T>(       \
      device T*, const device T*, device atomic_int*, constant IndexParams&, const device int*,    \
      const device int*, const device int*, const device int*, const device int*,                 \
      const device int*, const device int*, const device int*, const device int*, uint);        \
  template [[host_name("index_put_accumulate_sorted_" #name)]] kernel void                       \
  index_put_accumulate_sorted<T>(device T*, const device T*, constant IndexParams&,              \
                                 const device int*, const device int*, constant uint&, uint2);

INSTANTIATE_ACCUMULATE(float, float)
INSTANTIATE_ACCUMULATE(half, half)
INSTANTIATE_ACCUMULATE(bfloat, bfloat)
INSTANTIATE_ACCUMULATE(long, long)
INSTANTIATE_ACCUMULATE(int, int)
INSTANTIATE_ACCUMULATE(short, short)
INSTANTIATE_ACCUMULATE(char, char)
INSTANTIATE_ACCUMULATE(uchar, uchar)
INSTANTIATE_ACCUMULATE(bool, bool)

// Must match etm::ops::ScatterReduction (native/ops/scatter.h).
constant constexpr uint kAssign = 0, kSum = 1, kProd = 2, kMean = 3, kAmax = 4, kAmin = 5;

template <typename T> struct Compute { using type = T; };
template <> struct Compute<half> { using type = float; };
template <> struct Compute<bfloat> { using type = float; };
template <> struct Compute<bool> { using type = uchar; };  // sum / prod / amax / amin: or / and / or / and

template <typename C> inline C add(C a, C b) { return a + b; }
template <> inline long add(long a, long b) { return long(ulong(a) + ulong(b)); }
template <> inline int add(int a, int b) { return int(uint(a) + uint(b)); }
template <typename C> inline C multiply(C a, C b) { return a * b; }
template <> inline long multiply(long a, long b) { return long(ulong(a) * ulong(b)); }
template <> inline int multiply(int a, int b) { return int(uint(a) * uint(b)); }
template <typename C> inline bool is_nan(C) { return false; }
template <> inline bool is_nan(float v) { return isnan(v); }
template <typename C> inline C divide(C a, int count) {
  const C q = C(a / C(count));
  return (a % C(count) != 0 && a < 0) ? C(q - 1) : q;  // floor division, count > 0
}
template <> inline float divide(float a, int count) { return a / float(count); }

template <typename T> inline T lowest() { return numeric_limits<T>::lowest(); }
template <> inline float lowest() { return -INFINITY; }
template <> inline half lowest() { return -INFINITY; }
template <> inline bfloat lowest() { return bfloat(-INFINITY); }
template <typename T> inline T highest() { return numeric_limits<T>::max(); }
template <> inline float highest() { return INFINITY; }
template <> inline half highest() { return INFINITY; }
template <> inline bfloat highest() { return bfloat(INFINITY); }

template <typename T> inline T identity(uint reduction) {
  switch (reduction) {
    case kProd: return T(1);
    case kAmax: return lowest<T>();
    case kAmin: return highest<T>();
    default: return T(0);
  }
}

template <typename T> inline T combine(uint reduction, T current, T value) {
  using C = typename Compute<T>::type;
  const C a = C(current), b = C(value);
  switch (reduction) {
    case kSum:
    case kMean: return T(add(a, b));
    case kProd: return T(multiply(a, b));
    case kAmax: return (is_nan(a) || is_nan(b)) ? T(is_nan(a) ? a : b) : T(max(a, b));
    case kAmin: return (is_nan(a) || is_nan(b)) ? T(is_nan(a) ? a : b) : T(min(a, b));
    default: return value;
  }
}

template <typename T>
kernel void scatter(device T* out [[buffer(0)]], const device int* index [[buffer(1)]],
                    const device T* src [[buffer(2)]], device atomic_int* fault [[buffer(3)]],
                    device int* counts [[buffer(4)]], constant ScatterParams& p [[buffer(5)]],
                    uint t [[thread_position_in_grid]]) {
  long out_base = 0, index_base = 0, src_base = 0, count_base = 0;
  uint rest = t;
  for (int d = int(p.dims) - 1; d >= 0; --d) {
    if (uint(d) == p.dim) continue;
    const long c = long(rest % p.line_sizes[d]);
    rest /= p.line_sizes[d];
    out_base += c * p.out_strides[d];
    index_base += c * p.index_strides[d];
    src_base += c * p.src_strides[d];
    count_base += c * p.count_strides[d];
  }
  const constant T* scalar = reinterpret_cast<const constant T*>(&p.value_bits);
  const uint first_pass = p.include_self || p.reduction == kAssign ? 1 : 0;
  const uint last_pass = p.reduction == kMean ? 2 : 1;
  for (uint pass = first_pass; pass <= last_pass; ++pass) {
    for (uint k = 0; k < p.length; ++k) {
      const long offset = index_base + long(k) * p.index_strides[p.dim];
      const long position = p.long_index ? reinterpret_cast<const device long*>(index)[offset] : long(index[offset]);
      if (position < 0 || position >= long(p.out_size)) {
        if (pass == first_pass) record_fault(fault, 0, position);
        continue;
      }
      device T& target = out[out_base + position * p.out_strides[p.dim]];
      if (pass == 0) {
        target = identity<T>(p.reduction);
      } else if (pass == 1) {
        const T value = p.scalar_src ? *scalar : src[src_base + long(k) * p.src_strides[p.dim]];
        target = combine(p.reduction, target, value);
        if (p.reduction == kMean) counts[count_base + position * p.count_strides[p.dim]] += 1;
      } else {
        device int& count = counts[count_base + position * p.count_strides[p.dim]];
        if (count == 0) continue;
        target = T(divide(typename Compute<T>::type(target), count + int(p.include_self)));
        count = 0;
      }
    }
  }
}

// Offsets in out, index and src of line `line` (numbered over the dimensions other than dim,
// the last fastest), as the scatter kernel numbers them.
inline void scatter_line_bases(constant ScatterParams& p, uint line, thread long& out_base, thread long& index_base,
                               thread long& src_base) {
  out_base = index_base = src_base = 0;
  for (int d = int(p.dims) - 1; d >= 0; --d) {
    if (uint(d) == p.dim) continue;
    const long c = long(line % p.line_sizes[d]);
    line /= p.line_sizes[d];
    out_base += c * p.out_strides[d];
    index_base += c * p.index_strides[d];
    src_base += c * p.src_strides[d];
  }
}

// The sorted form's keys: one thread per index element, its value as an int32 key at
// line * length + (its place along dim), -1 when out of range (recorded in `fault`).
kernel void scatter_keys(device int* keys [[buffer(0)]], const device int* index [[buffer(1)]],
                         device atomic_int* fault [[buffer(2)]], constant ScatterParams& p [[buffer(3)]],
                         uint t [[thread_position_in_grid]]) {
  long out_base, index_base, src_base;
  scatter_line_bases(p, t / p.length, out_base, index_base, src_base);
  const long position = read_index(index, p.long_index, index_base + long(t % p.length) * p.index_strides[p.dim]);
  const bool inside = position >= 0 && position < long(p.out_size);
  if (!inside) record_fault(fault, 0, position);
  keys[t] = inside ? int(position) : -1;
}

// The sorted form: `sorted` holds scatter_keys' lines sorted (stably: equal keys keep their
// order) and `positions` where along dim each came from, both line after line. One thread per
// kSortedKeyRun keys of a line: for each run of equal keys that starts among its keys, it
// combines the run's src values into their element of out in position order, as the in-order
// kernel does, walking past its own keys when the run does.
template <typename T>
kernel void scatter_sorted(device T* out [[buffer(0)]], const device int* sorted [[buffer(1)]],
                           const device T* src [[buffer(2)]], const device int* positions [[buffer(3)]],
                           constant ScatterParams& p [[buffer(4)]], uint t [[thread_position_in_grid]]) {
  const uint chunks = (p.length + kSortedKeyRun - 1) / kSortedKeyRun, line = t / chunks;
  long out_base, index_base, src_base;
  scatter_line_bases(p, line, out_base, index_base, src_base);
  const device int* line_keys = sorted + long(line) * p.length;
  const device int* line_positions = positions + long(line) * p.length;
  const constant T* scalar = reinterpret_cast<const constant T*>(&p.value_bits);
  uint along = (t % chunks) * kSortedKeyRun;
  const uint end = min(along + kSortedKeyRun, p.length);
  int previous = along > 0 ? line_keys[along - 1] : -1;
  int key = line_keys[along];
  while (along < end) {
    if (key < 0 || key == previous) {  // out of range, or a run that started before these keys
      previous = key;
      key = ++along < end ? line_keys[along] : -1;
      continue;
    }
    device T& target = out[out_base + long(key) * p.out_strides[p.dim]];
    T result = p.include_self || p.reduction == kAssign ? target : identity<T>(p.reduction);
    uint combined = 0;
    int next;
    do {
      const T value = p.scalar_src ? *scalar : src[src_base + long(line_positions[along]) * p.src_strides[p.dim]];
      result = combine(p.reduction, result, value);
      ++combined;
      next = ++along < p.length ? line_keys[along] : -1;
    } while (next == key);
    if (p.reduction == kMean) result = T(divide(typename Compute<T>::type(result), int(combined + p.include_self)));
    target = result;
    previous = key;
    key = next;
  }
}

#define INSTANTIATE_SCATTER(T, name)                                                               \
  template [[host_name("scatter_" #name)]] kernel void scatter<T>(                                \
      device T*, const device int*, const device T*, device atomic_int*, device int*,            \
      constant ScatterParams&, uint);                                                            \
  template [[host_name("scatter_sorted_" #name)]] kernel void scatter_sorted<T>(                  \
      device T*, const device int*, const device T*, const device int*, constant ScatterParams&, \
      uint);

INSTANTIATE_SCATTER(float, float)
INSTANTIATE_SCATTER(half, half)
INSTANTIATE_SCATTER(bfloat, bfloat)
INSTANTIATE_SCATTER(long, long)
INSTANTIATE_SCATTER(int, int)
INSTANTIATE_SCATTER(short, short)
INSTANTIATE_SCATTER(char, char)
INSTANTIATE_SCATTER(uchar, uchar)
INSTANTIATE_SCATTER(bool, bool)

inline void write_integer(device int* data, bool is_long, long offset, long value) {
  if (is_long) {
    reinterpret_cast<device long*>(data)[offset] = value;
  } else {
    data[offset] = int(value);
  }
}

template <typename T>
kernel void embedding_bag(const device T* weight [[buffer(0)]], const device int* indices [[buffer(1)]],
                          const device int* offsets [[buffer(2)]], const device T* sample_weights [[buffer(3)]],
                          device T* out [[buffer(4)]], device int* offset2bag [[buffer(5)]],
                          device int* bag_size [[buffer(6)]], device int* max_indices [[buffer(7)]],
                          device atomic_int* fault [[buffer(8)]], constant EmbeddingBagParams& p [[buffer(9)]],
                          uint2 position [[thread_position_in_grid]]) {
  const uint feature = position.x, bag = position.y;
  const bool long_indices = p.long_indices != 0;
  const long start = clamp(read_index(offsets, p.long_offsets, long(bag) * p.offset_stride), 0L, long(p.indices));
  const bool last = bag + 1 == p.bags;
  const long given_end = last && !p.bag_ends_given ? long(p.indices)
                                                   : read_index(offsets, p.long_offsets, long(bag + 1) * p.offset_stride);
  const long end = clamp(given_end, start, long(p.indices));
  float accumulated = p.mode == 2 ? -INFINITY : 0.0f;
  long chosen = -1;
  long count = 0;
  for (long i = start; i < end; ++i) {
    const long row = read_index(indices, long_indices, i * p.index_stride);
    if (feature == 0) write_integer(offset2bag, long_indices, i, long(bag));
    if (row == p.padding_idx) continue;
    if (row < 0 || row >= long(p.rows)) {
      if (feature == 0) record_fault(fault, 0, row);
      continue;
    }
    float value = float(weight[row * p.weight_strides[0] + long(feature) * p.weight_strides[1]]);
    if (p.has_sample_weights) value *= float(sample_weights[i * p.sample_weight_stride]);
    ++count;
    if (p.mode == 2) {
      if (chosen < 0 || value > accumulated) {  // ties keep the first row
        accumulated = value;
        chosen = row;
      }
    } else {
      accumulated += value;
    }
  }
  if (feature == 0) {
    write_integer(bag_size, long_indices, long(bag), count);
    if (last && p.bag_ends_given) write_integer(bag_size, long_indices, long(bag) + 1, 0);
  }
  if (feature >= p.features) return;  // the one thread of a bag without features
  if (count == 0) accumulated = 0.0f;
  if (p.mode == 1 && count > 0) accumulated /= float(count);
  out[long(bag) * p.out_strides[0] + long(feature) * p.out_strides[1]] = T(accumulated);
  if (p.mode == 2) write_integer(max_indices, long_indices, long(bag) * long(p.features) + feature, chosen);
}

// embedding_bag's GPU launch shape: a threadgroup per (block of 32 features, bag), its
// simdgroups splitting the bag (each takes 32 consecutive entries of every chunk the group
// stages), so that a long bag is not walked by one thread; the lanes are the features. Per chunk
// the group loads the entries' rows and sample weights once into threadgroup memory (the
// features of a block share them). The partial results of the simdgroups are combined in a
// fixed order, so results do not depend on timing; the maximum is exact: a bag's result is its
// first counted element when that is NaN (which nothing replaces in order), else the first
// occurrence of the largest non-NaN element, the in-order kernel's rule (ties keep the first).
constant constexpr uint kBagFeatures = 32;
constant constexpr uint kBagMaxThreads = 256;

struct BagPartial {
  float sum;
  float first_value;  // the first counted element
  float best_value;   // the largest non-NaN element, first occurrence
  int count;
  long first_position;  // -1: none
  long first_row;
  long best_position;   // -1: none
  long best_row;
};

inline void add_to_bag(thread BagPartial& part, float value, long position, long row) {
  part.sum += value;
  ++part.count;
  if (part.first_position < 0) {
    part.first_value = value, part.first_position = position, part.first_row = row;
  }
  if (!isnan(value) && (part.best_position < 0 || value > part.best_value)) {
    part.best_value = value, part.best_position = position, part.best_row = row;
  }
}

// `later` holds elements of other positions than `part`; the result does not depend on the order.
inline void merge_bags(thread BagPartial& part, BagPartial later) {
  part.sum += later.sum;
  part.count += later.count;
  if (later.first_position >= 0 && (part.first_position < 0 || later.first_position < part.first_position)) {
    part.first_value = later.first_value, part.first_position = later.first_position;
    part.first_row = later.first_row;
  }
  if (later.best_position >= 0 &&
      (part.best_position < 0 || later.best_value > part.best_value ||
       (later.best_value == part.best_value && later.best_position < part.best_position))) {
    part.best_value = later.best_value, part.best_position = later.best_position, part.best_row = later.best_row;
  }
}

template <typename T>
kernel void embedding_bag_split(const device T* weight [[buffer(0)]], const device int* indices [[buffer(1)]],
                                const device int* offsets [[buffer(2)]], const device T* sample_weights [[buffer(3)]],
                                device T* out [[buffer(4)]], device int* offset2bag [[buffer(5)]],
                                device int* bag_size [[buffer(6)]], device int* max_indices [[buffer(7)]],
                                device atomic_int* fault [[buffer(8)]],
                                constant EmbeddingBagParams& p [[buffer(9)]],
                                uint2 group [[threadgroup_position_in_grid]],
                                uint tid [[thread_index_in_threadgroup]],
                                uint threads [[threads_per_threadgroup]],
                                uint slice [[simdgroup_index_in_threadgroup]],
                                uint lane [[thread_index_in_simdgroup]]) {
  threadgroup long bag_range[2];
  threadgroup long staged_rows[kBagMaxThreads];
  threadgroup float staged_scales[kBagMaxThreads];
  threadgroup BagPartial partials[kBagMaxThreads];
  const uint bag = group.y;
  const uint feature = group.x * kBagFeatures + lane;
  const bool first_block = group.x == 0;
  const bool long_indices = p.long_indices != 0;
  const bool last = bag + 1 == p.bags;
  if (tid == 0) {
    const long start = clamp(read_index(offsets, p.long_offsets, long(bag) * p.offset_stride), 0L, long(p.indices));
    const long given_end = last && !p.bag_ends_given
                               ? long(p.indices)
                               : read_index(offsets, p.long_offsets, long(bag + 1) * p.offset_stride);
    bag_range[0] = start;
    bag_range[1] = clamp(given_end, start, long(p.indices));
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const long start = bag_range[0], end = bag_range[1];
  BagPartial part = {0.0f, 0.0f, 0.0f, 0, -1, 0, -1, 0};
  for (long chunk = start; chunk < end; chunk += threads) {
    const long i = chunk + tid;
    if (i < end) {
      staged_rows[tid] = read_index(indices, long_indices, i * p.index_stride);
      staged_scales[tid] = p.has_sample_weights ? float(sample_weights[i * p.sample_weight_stride]) : 1.0f;
      if (first_block) write_integer(offset2bag, long_indices, i, long(bag));
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint j = 0; j < 32; ++j) {
      const uint entry = slice * 32 + j;
      const long position = chunk + entry;
      if (position >= end) break;
      const long row = staged_rows[entry];
      if (row == p.padding_idx) continue;
      if (row < 0 || row >= long(p.rows)) {
        if (first_block && lane == 0) record_fault(fault, 0, row);
        continue;
      }
      const float value = feature < p.features
                              ? float(weight[row * p.weight_strides[0] + long(feature) * p.weight_strides[1]]) *
                                    staged_scales[entry]
                              : 0.0f;
      add_to_bag(part, value, position, row);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  partials[tid] = part;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (slice != 0) return;
  for (uint s = 1; s < threads / 32; ++s) merge_bags(part, partials[s * 32 + lane]);
  if (first_block && lane == 0) {
    write_integer(bag_size, long_indices, long(bag), part.count);
    if (last && p.bag_ends_given) write_integer(bag_size, long_indices, long(bag) + 1, 0);
  }
  if (feature >= p.features) return;
  float result = 0.0f;
  long chosen = -1;
  if (p.mode == 2 && part.count > 0) {
    const bool first_is_nan = isnan(part.first_value);
    result = first_is_nan ? part.first_value : part.best_value;
    chosen = first_is_nan ? part.first_row : part.best_row;
  } else if (part.count > 0) {
    result = p.mode == 1 ? part.sum / float(part.count) : part.sum;
  }
  out[long(bag) * p.out_strides[0] + long(feature) * p.out_strides[1]] = T(result);
  if (p.mode == 2) write_integer(max_indices, long_indices, long(bag) * long(p.features) + feature, chosen);
}

#define INSTANTIATE_EMBEDDING_BAG(T, name)                                                         \
  template [[host_name("embedding_bag_" #name)]] kernel void embedding_bag<T>(                    \
      const device T*, const device int*, const device int*, const device T*, device T*,          \
      device int*, device int*, device int*, device atomic_int*, constant EmbeddingBagParams&,    \
      uint2);                                                                                     \
  template [[host_name("embedding_bag_split_" #name)]] kernel void embedding_bag_split<T>(        \
      const device T*, const device int*, const device int*, const device T*, device T*,          \
      device int*, device int*, device int*, device atomic_int*, constant EmbeddingBagParams&,    \
      uint2, uint, uint, uint, uint);

INSTANTIATE_EMBEDDING_BAG(float, float)
INSTANTIATE_EMBEDDING_BAG(half, half)
INSTANTIATE_EMBEDDING_BAG(bfloat, bfloat)
