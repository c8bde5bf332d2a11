// The dispatch trace: with ETMETAL_TRACE=out.json, every stream records its command buffers,
// dispatches (kernel, grid, threadgroup size, bytes bound, library, and the duration where
// the device times each command), copies, fills, commits and waits as a Chrome / Perfetto
// trace (JSON array format; open it in ui.perfetto.dev or chrome://tracing). Summarise it
// with `etmetal trace summary out.json`.
//
// Events are appended to the file as they complete; the file is closed (a valid JSON array)
// when the process exits. Timestamps are the host's steady clock (device::host_clock_us).
#pragma once

#include <cstdint>
#include <string>

namespace etm::trace {

// True when ETMETAL_TRACE names a file (read once).
bool enabled();

// A new track (a row in the trace viewer) with this name; returns its id.
uint32_t new_track(const std::string& name);
// The track of the calling thread ("host thread <its id>", created on first use).
uint32_t thread_track();

// A span [start_us, start_us + duration_us] on a track. `args_json` is the body of a JSON
// object ("\"k\": 1, ...") or empty.
void span(uint32_t track, const std::string& category, const std::string& name, double start_us,
          double duration_us, const std::string& args_json);
// A point in time on a track.
void instant(uint32_t track, const std::string& category, const std::string& name, double at_us,
             const std::string& args_json);

// `text` as a JSON string literal, quotes included.
std::string json_string(const std::string& text);

}  // namespace etm::trace
