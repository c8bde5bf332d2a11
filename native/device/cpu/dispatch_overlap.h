// Overlapping dispatches (ETMETAL_CPU_OVERLAP): a command buffer's dispatch that runs on one
// thread may start on an idle worker while earlier ones still run, when no memory barrier lies
// between them and none of them writes a buffer the other binds (cpu_device.cpp runs them).
// That needs every memory a kernel reaches to be bound: a kernel that could follow a device
// address read from memory (argument-buffer style) is never overlapped.
#pragma once

#include <string>

namespace etm::device::cpu {

// $ETMETAL_CPU_OVERLAP: "0" turns overlapping off (default on). Read once.
bool overlap_enabled();

// Whether kernels of this MSL source may reach memory through addresses stored in memory: a
// pointer or reference with an address space declared inside a struct, class or union (a
// member, or a function taking one), a pointer to a pointer, a template argument or cast
// naming a device or constant pointer type (casts between pointer types included: the operand's
// type is not known here). Over-approximates; true when the source does not lex.
bool may_follow_stored_addresses(const std::string& msl);

}  // namespace etm::device::cpu
