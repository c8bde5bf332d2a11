// The executor's entry points of a translated kernel (etm_cpu_kernel_abi.h) as one template.
// Per kernel the translator emits only which binding feeds each parameter, in order:
//   using etm__kernel_f = etm_cpu_kernel::kernel_wrapper<
//       static_cast<void (*)(const device float*, device float*, uint)>(&f),
//       ETM_CPU_REGIONS(&etm__regions_f), etm_cpu_kernel::no_max_threads,
//       etm_cpu_kernel::buffer<0>, etm_cpu_kernel::buffer<1>, etm_cpu_kernel::thread_position_in_grid>;
// and exports it as kernel N with ETM_CPU_KERNEL_ENTRY_POINTS(N, "execution note", etm__kernel_f)
// (plus ETM_CPU_KERNEL_REGIONS_ENTRY when the kernel has a barrier-region form).
// Included after <metal_stdlib>: `kernel`, `thread`, `device` ... are macros here, so no name
// below is one of them.
#pragma once

namespace etm_cpu_kernel {

#define ETM_CPU_ALWAYS_INLINE __attribute__((always_inline)) inline
#if defined(__clang__)
#define ETM_CPU_VECTORISING_LOOP __attribute__((flatten))
#else
#define ETM_CPU_VECTORISING_LOOP __attribute__((flatten, optimize("-fvect-cost-model=cheap")))
#endif

// Where a thread is in its group: x, y, z and its linear index.
struct thread_coordinates {
  uint32_t x, y, z, index;
};

// The three components of a thread attribute's value (0 past the attribute's width).
struct attribute_components {
  uint32_t c[3];
};

// A thread attribute's value as the parameter's type T (uint, ushort2, uint3 ...).
template <class T, class Attribute>
ETM_CPU_ALWAYS_INLINE std::remove_cv_t<T> attribute_value(const etm_cpu_launch* launch, const etm_cpu_group* group,
                                                          thread_coordinates thread_at) {
  using V = std::remove_cv_t<T>;
  using S = etm_msl::element_t<V>;
  const attribute_components v = Attribute::components(launch, group, thread_at);
  if constexpr (etm_msl::components_v<V> == 1) {
    return V(static_cast<S>(v.c[0]));
  } else if constexpr (etm_msl::components_v<V> == 2) {
    return V(static_cast<S>(v.c[0]), static_cast<S>(v.c[1]));
  } else {
    static_assert(etm_msl::components_v<V> == 3, "a thread attribute has at most 3 components");
    return V(static_cast<S>(v.c[0]), static_cast<S>(v.c[1]), static_cast<S>(v.c[2]));
  }
}

// What an attribute binds before the threads run: nothing, its value is per thread.
struct unbound {};

// A parameter given a thread attribute: computed for each thread.
template <class Attribute>
struct thread_attribute {
  static constexpr bool is_attribute = true;
  template <class P>
  static constexpr uint64_t bytes = 0;
  template <class P>
  ETM_CPU_ALWAYS_INLINE static unbound bind(const etm_cpu_launch*, const etm_cpu_group*) {
    return {};
  }
  template <class P>
  ETM_CPU_ALWAYS_INLINE static P value(unbound, const etm_cpu_launch* launch, const etm_cpu_group* group,
                                       thread_coordinates thread_at) {
    return attribute_value<P, Attribute>(launch, group, thread_at);
  }
};

// A parameter bound once per group (a buffer or threadgroup memory): every thread gets it.
struct group_argument {
  static constexpr bool is_attribute = false;
  template <class P, class Bound>
  ETM_CPU_ALWAYS_INLINE static P value(Bound&& bound, const etm_cpu_launch*, const etm_cpu_group*,
                                       thread_coordinates) {
    return static_cast<Bound&&>(bound);
  }
};

// [[buffer(Index)]]: a pointer, or a reference that reads sizeof(T) bytes at the bound address.
template <uint32_t Index>
struct buffer : group_argument {
  template <class P>
  static constexpr uint64_t bytes = std::is_reference_v<P> ? referenced_size<P>() : 0;
  template <class P>
  ETM_CPU_ALWAYS_INLINE static P bind(const etm_cpu_launch* launch, const etm_cpu_group*) {
    if constexpr (std::is_reference_v<P>) {
      return bind_reference<P>(launch->buffers[Index]);
    } else {
      return bind_pointer<P>(launch->buffers[Index]);
    }
  }
};

// [[threadgroup(Index)]]: a block of the group's dynamic threadgroup memory.
template <uint32_t Index>
struct threadgroup_memory : group_argument {
  template <class P>
  static constexpr uint64_t bytes = 0;
  template <class P>
  ETM_CPU_ALWAYS_INLINE static P bind(const etm_cpu_launch* launch, const etm_cpu_group* group) {
    return bind_pointer<P>(group->arena + launch->dynamic_threadgroup_offsets[Index]);
  }
};

// The thread attributes, named as in MSL: each component over the launch, the group and the
// thread's coordinates.
#define ETM_CPU_THREAD_ATTRIBUTE(attribute, c0, c1, c2)                                                  \
  struct attribute : thread_attribute<attribute> {                                                       \
    ETM_CPU_ALWAYS_INLINE static attribute_components components(const etm_cpu_launch* launch,           \
                                                                 const etm_cpu_group* group,             \
                                                                 thread_coordinates at) {                \
      (void)launch;                                                                                      \
      (void)group;                                                                                       \
      (void)at;                                                                                          \
      return {{c0, c1, c2}};                                                                             \
    }                                                                                                    \
  };
#define ETM_CPU_GROUP_THREADS (launch->threads_per_group[0] * launch->threads_per_group[1] * launch->threads_per_group[2])
ETM_CPU_THREAD_ATTRIBUTE(thread_position_in_grid, group->origin[0] + at.x, group->origin[1] + at.y,
                         group->origin[2] + at.z)
ETM_CPU_THREAD_ATTRIBUTE(thread_position_in_threadgroup, at.x, at.y, at.z)
ETM_CPU_THREAD_ATTRIBUTE(threadgroup_position_in_grid, group->position[0], group->position[1], group->position[2])
ETM_CPU_THREAD_ATTRIBUTE(threads_per_threadgroup, group->size[0], group->size[1], group->size[2])
ETM_CPU_THREAD_ATTRIBUTE(dispatch_threads_per_threadgroup, launch->threads_per_group[0],
                         launch->threads_per_group[1], launch->threads_per_group[2])
ETM_CPU_THREAD_ATTRIBUTE(threads_per_grid, launch->grid[0], launch->grid[1], launch->grid[2])
ETM_CPU_THREAD_ATTRIBUTE(threadgroups_per_grid, launch->groups[0], launch->groups[1], launch->groups[2])
ETM_CPU_THREAD_ATTRIBUTE(thread_index_in_threadgroup, at.index, 0u, 0u)
ETM_CPU_THREAD_ATTRIBUTE(thread_index_in_simdgroup, at.index & 31u, 0u, 0u)
ETM_CPU_THREAD_ATTRIBUTE(simdgroup_index_in_threadgroup, at.index >> 5, 0u, 0u)
ETM_CPU_THREAD_ATTRIBUTE(simdgroups_per_threadgroup, (group->thread_count + 31u) >> 5, 0u, 0u)
ETM_CPU_THREAD_ATTRIBUTE(dispatch_simdgroups_per_threadgroup, (ETM_CPU_GROUP_THREADS + 31u) >> 5, 0u, 0u)
ETM_CPU_THREAD_ATTRIBUTE(threads_per_simdgroup, 32u, 0u, 0u)
ETM_CPU_THREAD_ATTRIBUTE(thread_execution_width, 32u, 0u, 0u)
ETM_CPU_THREAD_ATTRIBUTE(thread_index_in_quadgroup, at.index & 3u, 0u, 0u)
ETM_CPU_THREAD_ATTRIBUTE(quadgroup_index_in_threadgroup, at.index >> 2, 0u, 0u)
ETM_CPU_THREAD_ATTRIBUTE(quadgroups_per_threadgroup, (group->thread_count + 3u) >> 2, 0u, 0u)
ETM_CPU_THREAD_ATTRIBUTE(dispatch_quadgroups_per_threadgroup, (ETM_CPU_GROUP_THREADS + 3u) >> 2, 0u, 0u)
#undef ETM_CPU_GROUP_THREADS
#undef ETM_CPU_THREAD_ATTRIBUTE

// [[max_total_threads_per_threadgroup(N)]] with N a constant expression (over template
// parameters): exported per instantiation as etm_kernel_max_threads_N. A literal N is the
// translator's, and the object exports 0 (no_max_threads).
struct no_max_threads {
  static constexpr uint32_t value = 0;
};
template <long long N>
struct max_threads {
  static_assert(N >= 1 && N <= 1024, "max_total_threads_per_threadgroup must be in 1..1024");
  static constexpr uint32_t value = static_cast<uint32_t>(N);
};

// Calls the region form with the group arguments among `bound` (attributes dropped), then the
// launch and group: each step moves the first value to the back or drops it.
template <class... Bindings>
struct region_call;
template <>
struct region_call<> {
  template <auto Regions, class... Kept>
  ETM_CPU_ALWAYS_INLINE static int run(const etm_cpu_launch* launch, const etm_cpu_group* group, Kept&&... kept) {
    return Regions(static_cast<Kept&&>(kept)..., launch, group);
  }
};
template <class Binding, class... Rest>
struct region_call<Binding, Rest...> {
  template <auto Regions, class First, class... Others>
  ETM_CPU_ALWAYS_INLINE static int run(const etm_cpu_launch* launch, const etm_cpu_group* group, First&& first,
                                       Others&&... others) {
    if constexpr (Binding::is_attribute) {
      return region_call<Rest...>::template run<Regions>(launch, group, static_cast<Others&&>(others)...);
    } else {
      return region_call<Rest...>::template run<Regions>(launch, group, static_cast<Others&&>(others)...,
                                                         static_cast<First&&>(first));
    }
  }
};

template <class Signature, auto Kernel, auto Regions, class MaxThreads, class... Bindings>
struct kernel_entries;

template <class... P, auto Kernel, auto Regions, class MaxThreads, class... Bindings>
struct kernel_entries<void (*)(P...), Kernel, Regions, MaxThreads, Bindings...> {
  static_assert(sizeof...(P) == sizeof...(Bindings), "one binding per kernel parameter");
  static constexpr uint32_t etm_max_threads = MaxThreads::value;

  // Every thread of the group, one after the other (kernels without barriers or SIMD calls).
  // A kernel without a region form gets the loop that vectorises; one with a region form
  // runs its loop only when a test forces that path. Checked and counted kernels keep the
  // plain loop: their accesses are checked thread by thread.
  static void etm_loop(const etm_cpu_launch* launch, const etm_cpu_group* group) {
    if constexpr (Regions == nullptr && !ETM_CPU_INSTRUMENTED) {
      vectorising_loop(launch, group);
    } else {
      group_scope scope;
      enter_group(launch, group, &scope, ETM_CPU_ENTRY_FRAME);
      ETM_CPU_LOCAL_GROUP(group)
      run_group(launch, group, Bindings::template bind<P>(launch, group)...);
      leave_group(&scope);
    }
  }

  // The thread with thread_index_in_threadgroup == index (on its fiber).
  static void etm_thread(const etm_cpu_launch* launch, const etm_cpu_group* group, uint32_t index) {
    group_scope scope;
    enter_group(launch, group, &scope, ETM_CPU_ENTRY_FRAME);
    run_thread(launch, group, index, Bindings::template bind<P>(launch, group)...);
    leave_group(&scope);
  }

  // Bytes read through each reference parameter, 0 for the others. Unchecked: no kernel code
  // (the executor may ask while another thread runs the kernel, etm_cpu_kernel.h's r15).
  ETM_CPU_ALWAYS_INLINE static void etm_argument_sizes(uint64_t* sizes) {
    uint64_t* next = sizes;
    ((*next++ = Bindings::template bytes<P>), ...);
    (void)next;
  }

  // The whole group as barrier regions (only for kernels with that form).
  static int etm_regions(const etm_cpu_launch* launch, const etm_cpu_group* group) {
    group_scope scope;
    enter_group(launch, group, &scope, ETM_CPU_ENTRY_FRAME);
    const int declined =
        region_call<Bindings...>::template run<Regions>(launch, group, Bindings::template bind<P>(launch, group)...);
    leave_group(&scope);
    return declined;
  }

 private:
  // The loop over the threads with the kernel inlined into it, so that g++ can vectorise it:
  // everything the kernel calls is inlined (flatten: a kernel past the inlining limits would
  // otherwise stay a call per thread), with the cost model that allows a scalar epilogue
  // (-O2's "very cheap" one vectorises only loops of a known multiple of the vector length).
  // The group's values come from a copy no store can change, and a group whose thread
  // positions could pass INT32_MAX runs thread by thread: past that test g++ knows that
  // `origin + x` wraps neither as uint nor as the int Inductor's kernels convert it to, so
  // `in[xindex]` reads consecutive elements instead of gathering them.
  ETM_CPU_VECTORISING_LOOP static void vectorising_loop(const etm_cpu_launch* launch, const etm_cpu_group* group) {
    const etm_cpu_group local = *group;
    constexpr uint32_t kLastOrigin = 0x7fffffffu - 1024;
    if (local.origin[0] > kLastOrigin || local.origin[1] > kLastOrigin || local.origin[2] > kLastOrigin ||
        local.size[0] > 1024 || local.size[1] > 1024 || local.size[2] > 1024) {
      for (uint32_t index = 0; index < local.thread_count; ++index) etm_thread(launch, group, index);
      return;
    }
    group_scope scope;
    enter_group(launch, &local, &scope, ETM_CPU_ENTRY_FRAME);
    run_group(launch, &local, Bindings::template bind<P>(launch, &local)...);
    leave_group(&scope);
  }

  template <class... Bound>
  ETM_CPU_ALWAYS_INLINE static void run_group(const etm_cpu_launch* launch, const etm_cpu_group* group,
                                              Bound&&... bound) {
    const uint32_t sx = group->size[0], sy = group->size[1], sz = group->size[2];
    for (uint32_t z = 0; z < sz; ++z) {
      for (uint32_t y = 0; y < sy; ++y) {
        const uint32_t row = sx * (y + sy * z);
#pragma GCC ivdep
        for (uint32_t x = 0; x < sx; ++x) {
          enter_thread(row + x);
          Kernel(Bindings::template value<P>(bound, launch, group, thread_coordinates{x, y, z, row + x})...);
        }
      }
    }
  }

  template <class... Bound>
  ETM_CPU_ALWAYS_INLINE static void run_thread(const etm_cpu_launch* launch, const etm_cpu_group* group,
                                               uint32_t index, Bound&&... bound) {
    const uint32_t sx = group->size[0], sy = group->size[1];
    thread_coordinates at{index, 0, 0, index};
    if (sx != group->thread_count) {
      at.x = index % sx;
      at.y = (index / sx) % sy;
      at.z = index / (sx * sy);
    }
    Kernel(Bindings::template value<P>(bound, launch, group, at)...);
  }
};

template <auto Kernel, auto Regions, class MaxThreads, class... Bindings>
using kernel_wrapper = kernel_entries<decltype(Kernel), Kernel, Regions, MaxThreads, Bindings...>;

}  // namespace etm_cpu_kernel

// A kernel's region form (a function, or nullptr when it has none) and its entry point; a
// library whose region forms do not compile is built again with ETM_CPU_NO_REGIONS.
#if ETM_CPU_NO_REGIONS
#define ETM_CPU_REGIONS(...) nullptr
#define ETM_CPU_KERNEL_REGIONS_ENTRY(n, ...)
#else
#define ETM_CPU_REGIONS(...) __VA_ARGS__
#define ETM_CPU_KERNEL_REGIONS_ENTRY(n, ...)                                                          \
  extern "C" ETM_CPU_KERNEL_EXPORT int etm_kernel_regions_##n(const etm_cpu_launch* l, const etm_cpu_group* g) { \
    return __VA_ARGS__::etm_regions(l, g);                                                                \
  }
#endif

// The entry points of kernel n (etm_cpu_kernel_abi.h), the wrapper type last.
#define ETM_CPU_KERNEL_ENTRY_POINTS(n, note, ...)                                                         \
  extern "C" ETM_CPU_KERNEL_EXPORT void etm_kernel_loop_##n(const etm_cpu_launch* l, const etm_cpu_group* g) { \
    __VA_ARGS__::etm_loop(l, g);                                                                              \
  }                                                                                                       \
  extern "C" ETM_CPU_KERNEL_EXPORT void etm_kernel_thread_##n(const etm_cpu_launch* l, const etm_cpu_group* g, \
                                                              uint32_t i) {                               \
    __VA_ARGS__::etm_thread(l, g, i);                                                                     \
  }                                                                                                       \
  extern "C" ETM_CPU_KERNEL_EXPORT __attribute__((ETM_CPU_NOT_INSTRUMENTED)) void etm_kernel_argument_sizes_##n(uint64_t* s) { \
    __VA_ARGS__::etm_argument_sizes(s);                                                                   \
  }                                                                                                       \
  extern "C" ETM_CPU_KERNEL_EXPORT const char etm_kernel_execution_note_##n[] = note;                    \
  extern "C" ETM_CPU_KERNEL_EXPORT const uint32_t etm_kernel_max_threads_##n = __VA_ARGS__::etm_max_threads;
