#include "device/cpu/kernel_faults.h"

#if defined(__linux__) && defined(__x86_64__)

#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "device/settings.h"
#include "device/tls_model.h"

namespace etm::device::cpu {
namespace {

// Code ranges of loaded kernel objects; appended under a mutex, read by the signal handler
// without locks (entries are complete before the count that publishes them).
constexpr size_t kMaxRanges = 8192;
struct CodeRange {
  uintptr_t begin;
  uintptr_t end;
};
CodeRange g_ranges[kMaxRanges];
std::atomic<size_t> g_range_count{0};
struct sigaction g_previous;

bool in_kernel_code(uintptr_t pc) {
  const size_t count = g_range_count.load(std::memory_order_acquire);
  for (size_t i = 0; i < count; ++i) {
    if (pc >= g_ranges[i].begin && pc < g_ranges[i].end) return true;
  }
  return false;
}

// x86-64 register number (ModRM / REX order) to its slot in the signal context.
constexpr int kRegisterSlots[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI, REG_RDI,
                                    REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};

struct Division {
  unsigned bits = 0;   // operand size: 8, 16, 32, 64
  bool is_signed = false;
  uint64_t divisor = 0;
  size_t length = 0;   // of the instruction
};

uint64_t truncate(uint64_t value, unsigned bits) { return bits == 64 ? value : value & ((uint64_t{1} << bits) - 1); }

// Decodes the `div`/`idiv` at pc (F6 /6, F6 /7, F7 /6, F7 /7 with prefixes) and reads its
// divisor; false for anything else.
bool decode(const unsigned char* pc, greg_t* regs, Division* out) {
  const unsigned char* p = pc;
  bool operand16 = false;
  for (;; ++p) {
    if (*p == 0x66) operand16 = true;
    else if (*p == 0x67 || *p == 0xF2 || *p == 0xF3 || *p == 0x2E || *p == 0x3E || *p == 0x26 || *p == 0x36) continue;
    else break;
  }
  unsigned rex = 0;
  if ((*p & 0xF0) == 0x40) rex = *p++;
  const unsigned char opcode = *p++;
  if (opcode != 0xF6 && opcode != 0xF7) return false;
  const unsigned char modrm = *p++;
  const unsigned mod = modrm >> 6, reg = (modrm >> 3) & 7, rm = modrm & 7;
  if (reg != 6 && reg != 7) return false;
  out->is_signed = reg == 7;
  out->bits = opcode == 0xF6 ? 8 : (rex & 8) ? 64 : operand16 ? 16 : 32;
  if (mod == 3) {
    const unsigned number = rm | ((rex & 1) << 3);
    uint64_t value = static_cast<uint64_t>(regs[kRegisterSlots[number]]);
    if (out->bits == 8 && rex == 0 && rm >= 4) value = static_cast<uint64_t>(regs[kRegisterSlots[rm - 4]]) >> 8;
    out->divisor = truncate(value, out->bits);
    out->length = static_cast<size_t>(p - pc);
    return true;
  }
  uint64_t address = 0;
  bool rip_relative = false;
  if (rm == 4) {
    const unsigned char sib = *p++;
    const unsigned scale = sib >> 6, index = ((sib >> 3) & 7) | ((rex & 2) << 2), base = (sib & 7) | ((rex & 1) << 3);
    if (index != 4) address += static_cast<uint64_t>(regs[kRegisterSlots[index]]) << scale;
    if ((sib & 7) == 5 && mod == 0) {
      int32_t displacement;
      std::memcpy(&displacement, p, 4);
      p += 4;
      address += static_cast<uint64_t>(static_cast<int64_t>(displacement));
    } else {
      address += static_cast<uint64_t>(regs[kRegisterSlots[base]]);
    }
  } else if (rm == 5 && mod == 0) {
    rip_relative = true;
  } else {
    address += static_cast<uint64_t>(regs[kRegisterSlots[rm | ((rex & 1) << 3)]]);
  }
  if (mod == 1) {
    address += static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(*p++)));
  } else if (mod == 2 || rip_relative) {
    int32_t displacement;
    std::memcpy(&displacement, p, 4);
    p += 4;
    address += static_cast<uint64_t>(static_cast<int64_t>(displacement));
  }
  out->length = static_cast<size_t>(p - pc);
  if (rip_relative) address += reinterpret_cast<uint64_t>(pc) + out->length;
  uint64_t value = 0;
  std::memcpy(&value, reinterpret_cast<const void*>(address), out->bits / 8);
  out->divisor = value;
  return true;
}

// Writes the AArch64 results for the faulting division into the context; false when the
// fault is not division by zero or the signed minimum over -1.
bool emulate(greg_t* regs, const Division& d) {
  const uint64_t rax = static_cast<uint64_t>(regs[REG_RAX]);
  const uint64_t dividend = truncate(rax, d.bits);  // the dividend's low half (AL for 8 bits)
  const uint64_t minimum = uint64_t{1} << (d.bits - 1);
  const uint64_t minus_one = truncate(~uint64_t{0}, d.bits);
  uint64_t quotient, remainder;
  if (d.divisor == 0) {
    quotient = 0;
    remainder = dividend;
  } else if (d.is_signed && d.divisor == minus_one && dividend == minimum) {
    quotient = minimum;
    remainder = 0;
  } else {
    return false;
  }
  auto merge = [](greg_t old, uint64_t value, unsigned bits) {
    if (bits == 64 || bits == 32) return static_cast<greg_t>(value);  // 32-bit writes zero-extend
    const uint64_t mask = (uint64_t{1} << bits) - 1;
    return static_cast<greg_t>((static_cast<uint64_t>(old) & ~mask) | value);
  };
  if (d.bits == 8) {
    regs[REG_RAX] = static_cast<greg_t>((rax & ~uint64_t{0xFFFF}) | quotient | (remainder << 8));
  } else {
    regs[REG_RAX] = merge(regs[REG_RAX], quotient, d.bits);
    regs[REG_RDX] = merge(regs[REG_RDX], remainder, d.bits);
  }
  return true;
}

void forward(const struct sigaction& previous, int signal, siginfo_t* info, void* context) {
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction) return previous.sa_sigaction(signal, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    return previous.sa_handler(signal);
  }
  // The default action: restore it; returning re-executes a faulting instruction, which
  // faults again; a signal sent by a process is sent again.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal, &default_action, nullptr);
  if (info->si_code <= 0) raise(signal);
}

void on_sigfpe(int signal, siginfo_t* info, void* raw_context) {
  auto* context = static_cast<ucontext_t*>(raw_context);
  greg_t* regs = context->uc_mcontext.gregs;
  const uintptr_t pc = static_cast<uintptr_t>(regs[REG_RIP]);
  Division division;
  if (info->si_code == FPE_INTDIV && in_kernel_code(pc) &&
      decode(reinterpret_cast<const unsigned char*>(pc), regs, &division) && emulate(regs, division)) {
    regs[REG_RIP] = static_cast<greg_t>(pc + division.length);
    return;
  }
  forward(g_previous, signal, info, raw_context);
}

}  // namespace

void register_kernel_code(void* handle) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  link_map* map = nullptr;
  if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map) return;
  struct Search {
    uintptr_t base;
  } search{static_cast<uintptr_t>(map->l_addr)};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* wanted = static_cast<Search*>(data);
        if (info->dlpi_addr != wanted->base) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& segment = info->dlpi_phdr[i];
          if (segment.p_type != PT_LOAD || !(segment.p_flags & PF_X)) continue;
          const size_t n = g_range_count.load(std::memory_order_relaxed);
          if (n == kMaxRanges) return 1;
          g_ranges[n] = {info->dlpi_addr + segment.p_vaddr, info->dlpi_addr + segment.p_vaddr + segment.p_memsz};
          g_range_count.store(n + 1, std::memory_order_release);
        }
        return 1;
      },
      &search);
  static bool installed = false;
  if (!installed) {
    struct sigaction action {};
    action.sa_sigaction = on_sigfpe;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    installed = sigaction(SIGFPE, &action, &g_previous) == 0;
  }
}

// ------------------------------------------------------------ faults that end a dispatch

namespace {

long current_thread_id() { return syscall(SYS_gettid); }

// The scope table: an entry per thread that runs kernels, claimed at its first scope and kept
// until it exits; read by the signal handlers and the watchdog without locks. Each entry has a
// cache line of its own: its thread writes it at every dispatch.
constexpr size_t kMaxScopes = 1024;
struct alignas(64) ScopeEntry {
  std::atomic<long> thread{0};                    // 0: free
  std::atomic<KernelFaultScope*> scope{nullptr};  // the armed scope; null while it is being armed
  // 2 * serial + 1 while a scope of the dispatch `serial` that has a timeout is armed, 2 * serial
  // once it ends: the watchdog sees dispatches come and go even between its polls.
  std::atomic<uint64_t> watched{0};
  std::atomic<uint64_t> timeout_ms{0};  // of the latest dispatch in `watched`
  std::atomic<uint64_t> interrupt{0};   // the serial of a dispatch the watchdog stops
};
// Constant-initialized and never destroyed: the handlers, the watchdog and threads' exits read
// the table at any time, during and after static destruction too.
ScopeEntry g_entries[kMaxScopes];
static_assert(std::is_trivially_destructible_v<ScopeEntry>);
std::atomic<size_t> g_entry_count{0};  // no entry past it was ever claimed

std::atomic<uint64_t> g_next_serial{1};
// The shortest timeout the watchdog polls for; UINT64_MAX while it sleeps (or before it
// starts). A scope armed with a shorter timeout wakes it.
std::atomic<uint64_t> g_polled_timeout_ms{UINT64_MAX};

int interrupt_signal() { return SIGRTMIN + 3; }

// Each thread that runs kernels gets a signal stack, so that a stack overflow can be handled.
class SignalStack {
 public:
  SignalStack() {
    stack_t current{};
    if (sigaltstack(nullptr, &current) == 0 && !(current.ss_flags & SS_DISABLE)) return;  // the thread has one
    memory_ = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory_ == MAP_FAILED) {
      memory_ = nullptr;
      return;
    }
    stack_t stack{};
    stack.ss_sp = memory_;
    stack.ss_size = kBytes;
    if (sigaltstack(&stack, nullptr) != 0) {
      munmap(memory_, kBytes);
      memory_ = nullptr;
    }
  }
  ~SignalStack() {
    if (!memory_) return;
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, nullptr);
    munmap(memory_, kBytes);
  }

 private:
  static constexpr size_t kBytes = 64 * 1024;
  void* memory_ = nullptr;
};

struct sigaction g_previous_segv;
struct sigaction g_previous_bus;

}  // namespace

// The handlers reach into the scopes (friends).
struct FaultHandlers {
  static KernelFaultScope* armed_scope() {
    const long thread = current_thread_id();
    const size_t count = g_entry_count.load(std::memory_order_acquire);
    for (size_t i = 0; i < count; ++i) {
      if (g_entries[i].thread.load(std::memory_order_acquire) == thread) return g_entries[i].scope.load(std::memory_order_acquire);  // null while it is being armed
    }
    return nullptr;
  }

  static void on_memory_fault(int signal, siginfo_t* info, void* raw_context) {
    auto* context = static_cast<ucontext_t*>(raw_context);
    const uintptr_t pc = static_cast<uintptr_t>(context->uc_mcontext.gregs[REG_RIP]);
    const uintptr_t sp = static_cast<uintptr_t>(context->uc_mcontext.gregs[REG_RSP]);
    const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
    const bool near_stack_pointer = address + 65536 >= sp && address <= sp + 65536;
    KernelFaultScope* scope = info->si_code > 0 ? armed_scope() : nullptr;
    if (scope && (in_kernel_code(pc) || near_stack_pointer)) {
      scope->fault_ = near_stack_pointer ? KernelFaultScope::Fault::stack_overflow : KernelFaultScope::Fault::memory_access;
      scope->address_ = address;
      scope->signal_ = signal;
      siglongjmp(scope->recovery_, 1);
    }
    forward(signal == SIGBUS ? g_previous_bus : g_previous_segv, signal, info, raw_context);
  }

  static void on_interrupt(int signal, siginfo_t*, void* raw_context) {
    auto* context = static_cast<ucontext_t*>(raw_context);
    const uintptr_t pc = static_cast<uintptr_t>(context->uc_mcontext.gregs[REG_RIP]);
    KernelFaultScope* scope = armed_scope();
    // The request may be for a dispatch this thread ran before (the serial tells); only kernel
    // code is left mid-way: the executor's and the C library's state stay whole.
    if (scope && g_entries[scope->slot_].interrupt.load(std::memory_order_acquire) == scope->faults_->serial_ &&
        in_kernel_code(pc)) {
      scope->fault_ = KernelFaultScope::Fault::timeout;
      scope->signal_ = signal;
      siglongjmp(scope->recovery_, 1);
    }
  }

  // A function-local static rather than std::call_once, which reaches libstdc++'s thread-locals
  // (a TLS lookup each) on every call.
  static void install() {
    static const bool installed = [] {
      struct sigaction action {};
      action.sa_sigaction = on_memory_fault;
      action.sa_flags = SA_SIGINFO | SA_ONSTACK;
      sigemptyset(&action.sa_mask);
      sigaction(SIGSEGV, &action, &g_previous_segv);
      sigaction(SIGBUS, &action, &g_previous_bus);
      struct sigaction interrupt {};
      interrupt.sa_sigaction = on_interrupt;
      interrupt.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
      sigemptyset(&interrupt.sa_mask);
      sigaction(interrupt_signal(), &interrupt, nullptr);
      return true;
    }();
    (void)installed;
  }

  // Publishes an armed scope's dispatch to the watchdog: three stores, and a lock only when
  // the watchdog must be woken.
  static void watch(ScopeEntry& entry, const DispatchFaults& faults) {
    entry.timeout_ms.store(faults.timeout_ms_, std::memory_order_relaxed);
    // Sequentially consistent, as the load below and the watchdog's store of the timeout it
    // polls for and its look at the table after it: either it sees this entry or this thread
    // sees the timeout it polls for.
    entry.watched.store(faults.serial_ * 2 + 1, std::memory_order_seq_cst);
    if (faults.timeout_ms_ < g_polled_timeout_ms.load(std::memory_order_seq_cst)) wake_watchdog(faults.timeout_ms_);
  }

  // The watchdog: one thread for the process, started by the first watched scope.
  struct Watchdog {
    std::mutex mutex;
    std::condition_variable wake;
    bool wake_requested = false;
    bool started = false;
  };
  static Watchdog& watchdog() {
    static Watchdog* w = new Watchdog();  // never destroyed: the thread outlives static destructors
    return *w;
  }

  [[gnu::noinline]] static void wake_watchdog(uint64_t timeout_ms) {
    Watchdog& w = watchdog();
    {
      std::lock_guard<std::mutex> lock(w.mutex);
      if (!w.started) {
        try {
          std::thread(watchdog_loop).detach();
          w.started = true;
        } catch (const std::system_error&) {
          return;  // no thread now: the next watched scope tries again
        }
      }
      // Woken, it looks at the table before it sleeps again and publishes what it polls for;
      // until then this timeout stands for it, so that scopes armed meanwhile with no shorter
      // one do not wake it again (it may be slow to get a processor).
      uint64_t polled = g_polled_timeout_ms.load(std::memory_order_relaxed);
      while (timeout_ms < polled && !g_polled_timeout_ms.compare_exchange_weak(polled, timeout_ms)) {
      }
      w.wake_requested = true;
    }
    w.wake.notify_one();
  }

  using Clock = std::chrono::steady_clock;

  // The shortest timeout among the armed entries, at most `limit`.
  static uint64_t shortest_armed_timeout(size_t count, uint64_t limit) {
    for (size_t i = 0; i < count; ++i) {
      if (g_entries[i].watched.load(std::memory_order_seq_cst) & 1)
        limit = std::min(limit, g_entries[i].timeout_ms.load(std::memory_order_relaxed));
    }
    return limit;
  }

  [[noreturn]] static void watchdog_loop() {
    struct Seen {
      uint64_t watched = 0;
      Clock::time_point since;  // when this value was first seen
    };
    std::vector<Seen> seen(kMaxScopes);
    std::vector<uint64_t> expired;  // serials of dispatches past their timeout that still run
    std::vector<uint64_t> running;
    Watchdog& w = watchdog();
    for (;;) {
      const Clock::time_point now = Clock::now();
      const size_t count = g_entry_count.load(std::memory_order_acquire);
      // The timeouts of the dispatches armed now or since the last poll: what to poll for.
      uint64_t shortest = UINT64_MAX;
      for (size_t i = 0; i < count; ++i) {
        const uint64_t watched = g_entries[i].watched.load(std::memory_order_acquire);
        const bool moved = watched != seen[i].watched;
        if (moved) seen[i] = {watched, now};
        if (!moved && !(watched & 1)) continue;
        const uint64_t timeout_ms = g_entries[i].timeout_ms.load(std::memory_order_relaxed);
        shortest = std::min(shortest, timeout_ms);
        const uint64_t serial = watched >> 1;
        // (A timeout of a later dispatch of the entry only names a serial that no thread runs.)
        if ((watched & 1) && now - seen[i].since >= std::chrono::milliseconds(timeout_ms)) expired.push_back(serial);
      }
      // Sorted and unique, so that each entry's test below is a binary search (up to kMaxScopes
      // threads may run expired dispatches).
      std::sort(expired.begin(), expired.end());
      expired.erase(std::unique(expired.begin(), expired.end()), expired.end());
      // Stop every thread that still runs an expired dispatch, again at each poll until it ends.
      running.clear();
      for (size_t i = 0; i < count && !expired.empty(); ++i) {
        const uint64_t watched = g_entries[i].watched.load(std::memory_order_acquire);
        const uint64_t serial = watched >> 1;
        if (!(watched & 1) || !std::binary_search(expired.begin(), expired.end(), serial)) continue;
        g_entries[i].interrupt.store(serial, std::memory_order_release);
        const long thread = g_entries[i].thread.load(std::memory_order_acquire);
        if (thread) syscall(SYS_tgkill, getpid(), thread, interrupt_signal());
        running.push_back(serial);  // sorted and made unique at the next poll
      }
      expired.swap(running);
      // Publishes what it polls for (UINT64_MAX: nothing armed and nothing moved since the last
      // poll; it sleeps until woken). A scope armed before a raise with a shorter timeout read
      // the old value and did not wake the watchdog: it looks again. (A waker that lowers the
      // value meanwhile also asks for another poll, which publishes again.)
      if (shortest > g_polled_timeout_ms.load(std::memory_order_seq_cst)) {
        g_polled_timeout_ms.store(shortest, std::memory_order_seq_cst);
        shortest = shortest_armed_timeout(g_entry_count.load(std::memory_order_acquire), shortest);
      }
      if (shortest != g_polled_timeout_ms.load(std::memory_order_seq_cst))
        g_polled_timeout_ms.store(shortest, std::memory_order_seq_cst);
      std::unique_lock<std::mutex> lock(w.mutex);
      if (shortest == UINT64_MAX) {
        w.wake.wait(lock, [&] { return w.wake_requested; });
      } else {
        auto interval = std::chrono::milliseconds(std::clamp<uint64_t>(shortest / 4, 5, 1000));
        if (!expired.empty()) interval = std::min(interval, std::chrono::milliseconds(20));
        w.wake.wait_for(lock, interval, [&] { return w.wake_requested; });
      }
      w.wake_requested = false;
    }
  }
};

uint64_t kernel_timeout_ms() {
  // read_integer leaves the default in place when the variable is unset.
  int64_t value = 300000;
  if (settings::read_integer("ETMETAL_KERNEL_TIMEOUT_MS", &value).ok() && value >= 0) return static_cast<uint64_t>(value);
  return 300000;
}

DispatchFaults::DispatchFaults(uint64_t timeout_ms)
    : serial_(timeout_ms ? g_next_serial.fetch_add(1, std::memory_order_relaxed) : 0), timeout_ms_(timeout_ms) {}

namespace {

// A thread's entry in the scope table, so that arming a scope is a few stores. SIZE_MAX while
// every entry is taken (its faults then keep their default action).
struct ScopeSlot {
  size_t index = SIZE_MAX;
  ScopeSlot() { claim(); }
  ScopeSlot(const ScopeSlot&) = delete;
  ScopeSlot& operator=(const ScopeSlot&) = delete;
  void claim() {
    const long thread = current_thread_id();
    for (size_t i = 0; i < kMaxScopes; ++i) {
      long expected = 0;
      if (g_entries[i].thread.compare_exchange_strong(expected, thread, std::memory_order_acq_rel)) {
        index = i;
        size_t count = g_entry_count.load(std::memory_order_relaxed);
        while (count < i + 1 && !g_entry_count.compare_exchange_weak(count, i + 1, std::memory_order_acq_rel)) {
        }
        return;
      }
    }
  }
  ~ScopeSlot() {
    if (index < kMaxScopes) g_entries[index].thread.store(0, std::memory_order_release);
  }
};

// ThreadScopeSlot::index before the thread's first scope (or while the table is full).
constexpr size_t kUnclaimedSlot = SIZE_MAX;
// ThreadScopeSlot::index once the thread's fault state is destroyed (the thread is exiting): a
// scope armed after that, by a later thread-local destructor, arms nothing. The entry it had may
// be another thread's by then, whose faults would jump into this thread's scope.
constexpr size_t kThreadExitedSlot = SIZE_MAX - 1;
static_assert(kThreadExitedSlot >= kMaxScopes);

// The calling thread's first scope (or one after the table was full): gives the thread its
// entry and a signal stack, makes sure the handlers are installed, and publishes the entry in
// `published`, the caller's per-thread copy.
[[gnu::noinline]] size_t claim_thread_scope_slot(ThreadScopeSlot& published) {
  struct ThreadState {
    ThreadState() { FaultHandlers::install(); }
    ~ThreadState() {
      if (published) published->index = kThreadExitedSlot;
    }
    ThreadScopeSlot* published = nullptr;
    SignalStack signal_stack;
    ScopeSlot slot;
  };
  ETM_THREAD_LOCAL ThreadState state;
  if (state.slot.index == SIZE_MAX) state.slot.claim();  // a table that was full may have room now
  state.published = &published;
  published.index = state.slot.index;
  return state.slot.index;
}

}  // namespace

KernelFaultScope::KernelFaultScope(DispatchFaults* faults, ThreadScopeSlot& thread_slot) : faults_(faults) {
  slot_ = thread_slot.index != kUnclaimedSlot ? thread_slot.index : claim_thread_scope_slot(thread_slot);
  if (slot_ >= kMaxScopes) return;
  ScopeEntry& entry = g_entries[slot_];
  entry.scope.store(this, std::memory_order_release);
  if (faults_->timeout_ms_) FaultHandlers::watch(entry, *faults_);
}

KernelFaultScope::~KernelFaultScope() {
  if (slot_ >= kMaxScopes) return;
  ScopeEntry& entry = g_entries[slot_];
  if (faults_->timeout_ms_) entry.watched.store(faults_->serial_ * 2, std::memory_order_release);
  entry.scope.store(nullptr, std::memory_order_release);
}

void KernelFaultScope::after_recovery() {
  if (signal_ == 0) return;
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, signal_);
  pthread_sigmask(SIG_UNBLOCK, &handled, nullptr);
}

std::string KernelFaultScope::message() const {
  const std::string group = " in threadgroup (" + std::to_string(group_[0]) + ", " + std::to_string(group_[1]) +
                            ", " + std::to_string(group_[2]) + ")";
  char address[32];
  std::snprintf(address, sizeof address, "0x%llx", static_cast<unsigned long long>(address_));
  switch (fault_) {
    case Fault::stack_overflow:
      return "stack overflow" + group + " (fault at " + address +
             "; a kernel thread has 128 KiB of stack on fibers, its worker's stack on the loop path)";
    case Fault::memory_access:
      return std::string("invalid memory access at ") + address + group +
             " (outside every mapping, or in a buffer's guard zone)";
    case Fault::timeout:
      return "did not finish within " + std::to_string(faults_->timeout_ms_) +
             " ms (ETMETAL_KERNEL_TIMEOUT_MS); its threads were stopped" + group;
    case Fault::none: break;
  }
  return "stopped by a fault" + group;
}

}  // namespace etm::device::cpu

#else

#include "device/settings.h"

namespace etm::device::cpu {

void register_kernel_code(void*) {}

uint64_t kernel_timeout_ms() { return 0; }
DispatchFaults::DispatchFaults(uint64_t timeout_ms) : serial_(0), timeout_ms_(timeout_ms) {}
KernelFaultScope::KernelFaultScope(DispatchFaults* faults, ThreadScopeSlot&) : faults_(faults) {}
KernelFaultScope::~KernelFaultScope() = default;
void KernelFaultScope::after_recovery() {}
std::string KernelFaultScope::message() const { return "stopped by a fault"; }

}  // namespace etm::device::cpu

#endif
