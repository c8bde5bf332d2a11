#include "ops/fft.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/fft.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kShaderFile = "fft.metal";
constexpr int kMaxDims = static_cast<int>(kFftOuterDims);

const auto kFloat32 = static_cast<int32_t>(DType::float32);
const auto kComplex64 = static_cast<int32_t>(DType::complex64);

// The factors the passes combine: 16s first (two radix-4 stages in registers, in one
// dispatch: half the passes' memory traffic), then 4s, then primes in increasing order.
std::vector<uint32_t> radices(uint32_t n) {
  std::vector<uint32_t> factors;
  while (n % 16 == 0) {
    factors.push_back(16);
    n /= 16;
  }
  while (n % 4 == 0) {
    factors.push_back(4);
    n /= 4;
  }
  for (uint32_t p = 2; p * p <= n; ++p) {
    while (n % p == 0) {
      factors.push_back(p);
      n /= p;
    }
  }
  if (n > 1) factors.push_back(n);
  return factors;
}

// What one 1-D transform reads and writes: self's elements along `dim` (`source_length` of
// them), `length` the transform's length, and the first `destination_length` results into
// `destination` along the same dim (destination's other dims equal source's).
struct LineTransform {
  const Tensor* source;
  const Tensor* destination;
  int64_t dim;
  int64_t length;
  int64_t destination_length;
  bool forward;
  float scale;
};

enum class Load { real, complex, hermitian };

// Whether a pass of `radix` runs a thread per butterfly (fft_butterfly_*) rather than per output.
bool has_butterfly(uint32_t radix) { return radix == 2 || radix == 4 || radix == 16; }

// Device-memory accesses of the passes of a length-n transform per line: a pass of radix 2, 4
// or 16 reads and writes each element once (a thread per butterfly); one of another radix p reads
// p inputs per output (each with its own twiddle, so this counts the work too) and writes it.
uint64_t pass_accesses(uint64_t n) {
  uint64_t accesses = 0;
  for (uint32_t radix : radices(static_cast<uint32_t>(n))) accesses += n * (has_butterfly(radix) ? 2 : radix + 1);
  return accesses;
}

// The power-of-two length of a chirp-z transform of length n's convolutions.
uint64_t chirp_length(uint64_t n) {
  uint64_t m = 1;
  while (m < 2 * n - 1) m *= 2;
  return m;
}

// Whether a length-n transform takes fewer accesses per line as a chirp-z transform: two
// power-of-two transforms of m >= 2n - 1 and the pointwise steps (spread: n reads, m writes;
// convolve: 2m reads, m writes; gather: m reads, n writes; the filter, once per call, is left
// out) against n's own passes (n * (p + 1) for a prime factor p). It picks the chirp for no
// length below 31; for the primes 31 and from 53 on (37 to 47, where m = 128 takes a third
// pass, keep their own); and for every length with a prime factor from 1024 on, whose pass
// would have each thread walk p >= 1024 inputs, where a thread of the chirp's passes reads 16.
bool chirp_z_is_cheaper(uint32_t n) {
  if (n < 5) return false;
  const uint64_t m = chirp_length(n);
  return 2 * pass_accesses(m) + 5 * m + 2 * uint64_t{n} < pass_accesses(n);
}

// The largest power of two dividing n.
uint32_t power_of_two_part(uint32_t n) { return n & (~n + 1); }

bool is_power_of_two(uint64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// The threadgroup of an fft_group_* dispatch of `column_count` transforms of `radix`: as many
// columns as fill kFftGroupElements (at most 256 threads of 16 elements; fewer columns when there
// are fewer), so a group's loads and stores run along whole lines or many columns.
struct GroupShape {
  uint32_t columns;
  uint32_t threads;
  uint32_t groups;
};

GroupShape group_shape(uint32_t radix, uint32_t column_count) {
  const uint32_t per_thread = std::min<uint32_t>(radix, 16);
  uint32_t columns = std::min<uint32_t>(kFftGroupElements / radix, 256 * per_thread / radix);
  while (columns > 1 && columns / 2 >= column_count) columns /= 2;
  return {columns, columns * radix / per_thread, (column_count + columns - 1) / columns};
}

// Whether transforms take fft_group_* (threadgroup memory): on the GPU launch shape. On the CPU
// device a threadgroup runs on one core and its barriers cost region loops: there the group
// kernels tie with the device passes for powers of two and take up to 2x as long for chirp-z
// lengths of m >= 8192 (tools/kernel_report.py --time --compare-shapes).
bool uses_threadgroup_transforms() { return launch_shape() == LaunchShape::gpu; }

void dispatch_group(const std::string& kernel, const Tensor& source, const Tensor& destination, const Tensor& filter,
                    const FftLines& lines, FftGroup group) {
  const GroupShape shape = group_shape(group.radix, group.column_count);
  group.columns = shape.columns;
  KernelLaunch launch(shader_kernel(kShaderFile, kernel));
  launch.tensor(0, source).tensor(1, destination).tensor(2, filter).value(3, lines).value(4, group);
  launch.threadgroups({shape.groups, 1, 1}, {shape.threads, 1, 1});
}

// The radices of fft_group_stage dispatches for a power of two: as few as fit
// kFftGroupElements (one up to 4096, two up to 2^24: four-step), of about equal sizes.
std::vector<uint32_t> stage_radices(uint32_t power) {
  int bits = 0;
  while ((1u << bits) < power) ++bits;
  const int stages = (bits + 11) / 12;
  std::vector<uint32_t> radices;
  for (int stage = 0; stage < stages; ++stage) radices.push_back(1u << ((bits * (stage + 1)) / stages - (bits * stage) / stages));
  return radices;
}

// The chirp-z steps a run of stages folds into its first loads and last stores (kFftChirp*).
struct ChirpSteps {
  uint32_t first = 0;
  uint32_t last = 0;
  uint32_t length = 0;           // the chirp-z transform's n
  float scale = 1.0f;            // 1 / m, with kFftChirpGather
  const Tensor* filter = nullptr;  // the filter's spectrum, with kFftChirpFilter
};

// Stockham stages of fft_group_stage from span 1 up to the power-of-two part of `length`, over
// `lines` lines: the first reads `source`, each writes the other buffer of `buffers` than the one
// before (the first writes buffers[0]); returns the index of the buffer written last.
int run_stages(const Tensor& source, Tensor* const buffers[2], uint32_t length, uint32_t lines, float sign,
               const ChirpSteps& steps = {}) {
  const std::vector<uint32_t> radices = stage_radices(power_of_two_part(length));
  const Tensor* from = &source;
  uint32_t span = 1;
  int written = 1;
  for (size_t i = 0; i < radices.size(); ++i) {
    const uint32_t chirp = (i == 0 ? steps.first : 0) | (i + 1 == radices.size() ? steps.last : 0);
    const FftGroup group{length, span, radices[i], 0, length / radices[i] * lines, 0, chirp, steps.length, sign,
                         steps.scale};
    written = 1 - written;
    dispatch_group("fft_group_stage", *from, *buffers[written], steps.filter ? *steps.filter : *from, FftLines{},
                   group);
    from = buffers[written];
    span *= radices[i];
  }
  return written;
}

// Runs the passes of a transform of `length` over `lines` lines held line after line in
// buffers[current], each pass writing the other buffer; returns the buffer holding the result.
// With threadgroup transforms, the power-of-two part of the length takes fft_group_stage
// dispatches (run_stages), each reading and writing every element once; the other factors
// take a pass each.
int run_passes(Tensor* const buffers[2], int current, uint32_t length, uint32_t lines, bool forward) {
  FftPass pass{length, 1, 0, forward ? -1.0f : 1.0f};
  uint32_t rest = length;
  if (uses_threadgroup_transforms() && power_of_two_part(length) > 1) {
    Tensor* const ordered[2] = {buffers[1 - current], buffers[current]};
    current = run_stages(*buffers[current], ordered, length, lines, pass.sign) == 0 ? 1 - current : current;
    pass.span = power_of_two_part(length);
    rest /= pass.span;
  }
  for (uint32_t radix : radices(rest)) {
    pass.radix = radix;
    const bool butterfly = has_butterfly(radix);
    const std::string kernel = butterfly ? "fft_butterfly_" + std::to_string(radix) : "fft_pass";
    KernelLaunch launch(shader_kernel(kShaderFile, kernel));
    launch.tensor(0, *buffers[current]).tensor(1, *buffers[1 - current]).value(2, pass);
    const device::Size3 grid{butterfly ? length / radix : length, lines, 1};
    launch.threads(grid, default_group(grid, launch));
    pass.span *= radix;
    current = 1 - current;
  }
  return current;
}

// The transform of the chirp-z convolution's filter (conj(c_t) at t and m - t, t < n), of the
// chirp's sign (the filter is symmetric, so either sign gives the same spectrum); returns the
// tensor holding it. With threadgroup transforms the first stage makes the filter as it loads.
std::shared_ptr<Tensor> chirp_filter_spectrum(const FftChirp& chirp) {
  Runtime& runtime = Runtime::get();
  std::shared_ptr<Tensor> filter[2] = {runtime.empty_tensor({chirp.padded}, {1}, kComplex64),
                                       runtime.empty_tensor({chirp.padded}, {1}, kComplex64)};
  Tensor* const buffers[2] = {filter[0].get(), filter[1].get()};
  if (uses_threadgroup_transforms()) {
    ChirpSteps steps;
    steps.first = kFftChirpMakeFilter;
    steps.length = chirp.length;
    return filter[run_stages(*filter[1], buffers, chirp.padded, 1, chirp.sign, steps)];
  }
  KernelLaunch launch(shader_kernel(kShaderFile, "fft_chirp_filter"));
  launch.tensor(0, *filter[0]).value(1, chirp);
  const device::Size3 grid{chirp.padded, 1, 1};
  launch.threads(grid, default_group(grid, launch));
  return filter[run_passes(buffers, 0, chirp.padded, 1, true)];
}

FftChirp chirp_for(uint32_t n, bool forward) {
  const auto m = static_cast<uint32_t>(chirp_length(n));
  return {n, m, forward ? -1.0f : 1.0f, 1.0f / static_cast<float>(m)};
}

// A chirp-z transform of the `lines` lines of `work` (n each) in place, through two
// power-of-two transforms of m per line and one of the filter (fft.metal: fft_chirp_*).
void chirp_z_transform(const char* op, Tensor& work, uint32_t n, uint32_t lines, bool forward) {
  const uint32_t m = checked_u32(op, chirp_length(n), "padded signal length");
  const int64_t padded_elements = static_cast<int64_t>(lines) * m;
  checked_u32(op, padded_elements, "number of padded elements");
  const FftChirp chirp = chirp_for(n, forward);
  Runtime& runtime = Runtime::get();
  const std::shared_ptr<Tensor> filter_spectrum = chirp_filter_spectrum(chirp);
  std::shared_ptr<Tensor> padded[2] = {runtime.empty_tensor({padded_elements}, {1}, kComplex64),
                                       runtime.empty_tensor({padded_elements}, {1}, kComplex64)};
  Tensor* const padded_buffers[2] = {padded[0].get(), padded[1].get()};
  if (uses_threadgroup_transforms() && stage_radices(m).size() % 2 == 0) {
    // The spread, the product with the filter's spectrum and the gather ride on the stages'
    // first loads and last stores; the inverse transform's last stage writes `work`.
    ChirpSteps steps;
    steps.first = kFftChirpSpread;
    steps.length = n;
    const int current = run_stages(work, padded_buffers, m, lines, chirp.sign, steps);
    steps.first = kFftChirpFilter;
    steps.last = kFftChirpGather;
    steps.scale = chirp.scale;
    steps.filter = filter_spectrum.get();
    Tensor* const inverse_buffers[2] = {padded_buffers[1 - current], &work};  // an even count of stages ends in work
    run_stages(*padded_buffers[current], inverse_buffers, m, lines, -chirp.sign, steps);
    return;
  }
  const device::Size3 padded_grid{m, lines, 1};
  {
    KernelLaunch launch(shader_kernel(kShaderFile, "fft_chirp_spread"));
    launch.tensor(0, work).tensor(1, *padded[0]).value(2, chirp);
    launch.threads(padded_grid, default_group(padded_grid, launch));
  }
  int current = run_passes(padded_buffers, 0, m, lines, true);
  {
    KernelLaunch launch(shader_kernel(kShaderFile, "fft_chirp_convolve"));
    launch.tensor(0, *padded_buffers[current]).tensor(1, *filter_spectrum).value(2, chirp);
    launch.threads(padded_grid, default_group(padded_grid, launch));
  }
  current = run_passes(padded_buffers, current, m, lines, false);
  KernelLaunch launch(shader_kernel(kShaderFile, "fft_chirp_gather"));
  launch.tensor(0, *padded_buffers[current]).tensor(1, work).value(2, chirp);
  const device::Size3 grid{n, lines, 1};
  launch.threads(grid, default_group(grid, launch));
}

// Whole lines of a length that fits threadgroup memory, in one fft_group_* dispatch from the
// source to the destination: a power of two directly, any other length as a chirp-z transform
// (its convolutions' m <= kFftGroupElements), after one more for the filter's spectrum.
void transform_lines_in_threadgroups(const LineTransform& t, const FftLines& lines, uint32_t line_total,
                                     uint32_t output_length, Load load) {
  const bool chirp = !is_power_of_two(lines.length);
  const FftChirp chirp_params = chirp_for(lines.length, t.forward);
  const FftGroup group{lines.length, 1, chirp ? chirp_params.padded : lines.length, 0, line_total, output_length,
                       chirp ? kFftChirpLine : 0u, lines.length, chirp_params.sign, chirp_params.scale};
  const std::shared_ptr<Tensor> filter = chirp ? chirp_filter_spectrum(chirp_params) : nullptr;
  const char* kernel = load == Load::real ? "fft_group_r2c" : load == Load::complex ? "fft_group_c2c" : "fft_group_c2r";
  dispatch_group(kernel, *t.source, *t.destination, filter ? *filter : *t.destination, lines, group);
}

void transform_lines(const char* op, const LineTransform& t, Load load) {
  const Tensor& source = *t.source;
  const Tensor& destination = *t.destination;
  FftLines lines{};
  int64_t line_count;
  lines.outer_dims = pack_outer_dims(op, source.sizes, t.dim,
                                     {{source.strides, lines.source_outer},
                                      {destination.strides, lines.destination_outer}},
                                     lines.outer_sizes, line_count);
  if (line_count == 0) return;
  lines.source_stride = source.strides[t.dim];
  lines.destination_stride = destination.strides[t.dim];
  lines.length = checked_u32(op, t.length, "signal length");
  lines.source_length = checked_u32(op, source.sizes[t.dim], "signal length");
  lines.scale = t.scale;
  const uint32_t line_total = checked_u32(op, line_count, "number of signals");
  checked_u32(op, line_count * t.length, "number of transformed elements");

  const uint32_t output_length = checked_u32(op, t.destination_length, "output length");
  if (uses_threadgroup_transforms() && (is_power_of_two(lines.length) ? lines.length <= kFftGroupElements
                                                                      : chirp_length(lines.length) <= kFftGroupElements)) {
    transform_lines_in_threadgroups(t, lines, line_total, output_length, load);
    return;
  }
  Runtime& runtime = Runtime::get();
  const std::vector<int64_t> work_sizes{line_count * t.length};
  std::shared_ptr<Tensor> work[2] = {runtime.empty_tensor(work_sizes, {1}, kComplex64), nullptr};
  const device::Size3 grid{lines.length, line_total, 1};
  const char* load_kernel = load == Load::real ? "fft_load_real"
                            : load == Load::complex ? "fft_load_complex"
                                                    : "fft_load_hermitian";
  {
    KernelLaunch launch(shader_kernel(kShaderFile, load_kernel));
    launch.tensor(0, source).tensor(1, *work[0]).value(2, lines);
    launch.threads(grid, default_group(grid, launch));
  }
  int current = 0;
  if (chirp_z_is_cheaper(lines.length)) {
    chirp_z_transform(op, *work[0], lines.length, line_total, t.forward);
  } else {
    work[1] = runtime.empty_tensor(work_sizes, {1}, kComplex64);
    Tensor* const work_buffers[2] = {work[0].get(), work[1].get()};
    current = run_passes(work_buffers, 0, lines.length, line_total, t.forward);
  }
  const bool real_output = destination.dtype == kFloat32;
  KernelLaunch launch(shader_kernel(kShaderFile, real_output ? "fft_store_real" : "fft_store_complex"));
  launch.tensor(0, *work[current]).tensor(1, destination).value(2, lines);
  const device::Size3 store_grid{output_length, line_total, 1};
  launch.threads(store_grid, default_group(store_grid, launch));
}

// Wraps and checks `dim` against self (unique, in range) and self's layout.
std::vector<int64_t> transformed_dims(const char* op, const Tensor& self, const std::vector<int64_t>& dim) {
  require_mps(op, "self", self);
  ETM_REQUIRE(self.dim() <= kMaxDims + 1, op, ": at most ", kMaxDims + 1, " dimensions are supported, got ",
              self.dim());
  std::vector<int64_t> wrapped;
  for (int64_t d : dim) {
    ETM_REQUIRE(self.dim() > 0, op, ": a 0-dimensional tensor has no dimension ", d, " to transform");
    const int64_t w = wrap_dim(op, d, self.dim());
    ETM_REQUIRE(std::find(wrapped.begin(), wrapped.end(), w) == wrapped.end(), op, ": dim ", d,
                " appears more than once");
    wrapped.push_back(w);
  }
  return wrapped;
}

void require_dtype(const char* op, const Tensor& self, int32_t dtype) {
  ETM_REQUIRE(self.dtype == dtype, op, ": expects a ", dtype_name(dtype), " input, got ", dtype_name(self.dtype),
              self.dtype == static_cast<int32_t>(DType::float64) ||
                      self.dtype == static_cast<int32_t>(DType::complex128)
                  ? " (Metal has no 64-bit floating point)"
                  : " (the transforms run in float32 / complex64)");
}

void require_points(const char* op, int64_t n) {
  ETM_REQUIRE(n >= 1, op, ": Invalid number of data points (", n, ") specified");
}

// 1, 1 / sqrt(n) or 1 / n for `normalization` (an FftNorm) and n the product of the signal sizes.
float scale_for(const char* op, int64_t normalization, double n) {
  switch (static_cast<FftNorm>(normalization)) {
    case FftNorm::none: return 1.0f;
    case FftNorm::by_root_n: return static_cast<float>(1.0 / std::sqrt(n));
    case FftNorm::by_n: return static_cast<float>(1.0 / n);
  }
  fail(op, ": normalization ", normalization, " is not one of 0 (none), 1 (by root n), 2 (by n)");
}

struct CheckedTransform {
  std::vector<int64_t> dims;  // wrapped, in the caller's order
  float scale;                // what `normalization` asks for
};

// The checks every transform starts with: `dim` against self, self's dtype, and each signal
// size (self's along dims; along the last one `last_signal_size` instead, when c2r gives it).
CheckedTransform check_transform(const char* op, const Tensor& self, const std::vector<int64_t>& dim,
                                 int32_t dtype, int64_t normalization, bool needs_dims,
                                 std::optional<int64_t> last_signal_size = std::nullopt) {
  CheckedTransform checked{transformed_dims(op, self, dim), 1.0f};
  require_dtype(op, self, dtype);
  ETM_REQUIRE(!needs_dims || !checked.dims.empty(), op, ": dim must name at least one dimension");
  double signal = 1;
  for (size_t i = 0; i < checked.dims.size(); ++i) {
    const bool last = i + 1 == checked.dims.size();
    const int64_t n = last && last_signal_size ? *last_signal_size : self.sizes[checked.dims[i]];
    require_points(op, n);
    signal *= static_cast<double>(n);
  }
  checked.scale = scale_for(op, normalization, signal);
  return checked;
}

// `dims` with all but (when exclude_last) the last ordered by decreasing stride of `strides`,
// equal strides keeping their order (torch's _sort_dims).
std::vector<int64_t> sorted_by_stride(std::vector<int64_t> dims, const std::vector<int64_t>& strides,
                                      bool exclude_last) {
  std::stable_sort(dims.begin(), dims.end() - (exclude_last ? 1 : 0),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  return dims;
}

// The layout torch's meta functions give a transform's result (_exec_fft): dense, with the
// untransformed dimensions outermost in decreasing order of the input's strides, then the
// transformed ones in the order of `dims`. Compiled models index the result with these
// strides. (A host without MKL gives _fft_r2c / _fft_c2r results a contiguous layout instead;
// the two agree whenever the batch dimensions lead in stride order and dims are trailing.)
std::vector<int64_t> fft_output_strides(const std::vector<int64_t>& input_strides,
                                        const std::vector<int64_t>& out_sizes, const std::vector<int64_t>& dims) {
  const size_t ndim = out_sizes.size();
  std::vector<int64_t> batch;
  for (size_t d = 0; d < ndim; ++d) {
    if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end()) batch.push_back(d);
  }
  batch = sorted_by_stride(batch, input_strides, false);
  std::vector<int64_t> order = batch;  // outermost first
  order.insert(order.end(), dims.begin(), dims.end());
  std::vector<int64_t> strides(ndim);
  int64_t next = 1;
  for (size_t i = ndim; i-- > 0;) {
    strides[order[i]] = next;
    next *= std::max<int64_t>(out_sizes[order[i]], 1);
  }
  return strides;
}

std::unique_ptr<Tensor> new_tensor(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                   int32_t dtype) {
  return Runtime::get().empty_tensor(sizes, strides, dtype);
}

// In-place complex transforms of `tensor` over `dims` (each an own 1-D pass); the last one scales.
void transform_complex(const char* op, const Tensor& source, const Tensor& out, const std::vector<int64_t>& dims,
                       bool forward, float final_scale) {
  const Tensor* from = &source;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t n = out.sizes[dims[i]];
    transform_lines(op, {from, &out, dims[i], n, n, forward, i + 1 == dims.size() ? final_scale : 1.0f},
                    Load::complex);
    from = &out;
  }
}

}  // namespace

std::unique_ptr<Tensor> fft_r2c(const Tensor& self, const std::vector<int64_t>& dim, int64_t normalization,
                                bool onesided) {
  constexpr const char* op = "_fft_r2c";
  const auto [dims, scale] = check_transform(op, self, dim, kFloat32, normalization, true);
  const int64_t last = dims.back();
  const int64_t n = self.sizes[last];
  std::vector<int64_t> out_sizes = self.sizes;
  if (onesided) out_sizes[last] = n / 2 + 1;
  auto out = new_tensor(out_sizes, fft_output_strides(self.strides, out_sizes, sorted_by_stride(dims, self.strides, true)),
                        kComplex64);
  if (out->numel() == 0) return out;
  const std::vector<int64_t> rest(dims.begin(), dims.end() - 1);
  transform_lines(op, {&self, out.get(), last, n, out_sizes[last], true, rest.empty() ? scale : 1.0f}, Load::real);
  transform_complex(op, *out, *out, rest, true, scale);
  return out;
}

std::unique_ptr<Tensor> fft_c2c(const Tensor& self, const std::vector<int64_t>& dim, int64_t normalization,
                                bool forward) {
  constexpr const char* op = "_fft_c2c";
  const auto [dims, scale] = check_transform(op, self, dim, kComplex64, normalization, false);
  if (dims.empty()) {  // torch's result is a clone
    auto copy = new_tensor(self.sizes, contiguous_strides(self.sizes), kComplex64);
    if (copy->numel() > 0) Runtime::get().copy_tensor(*copy, self);
    return copy;
  }
  auto out = new_tensor(self.sizes, fft_output_strides(self.strides, self.sizes, sorted_by_stride(dims, self.strides, false)),
                        kComplex64);
  if (out->numel() == 0) return out;
  transform_complex(op, self, *out, dims, forward, scale);
  return out;
}

std::unique_ptr<Tensor> fft_c2r(const Tensor& self, const std::vector<int64_t>& dim, int64_t normalization,
                                int64_t last_dim_size) {
  constexpr const char* op = "_fft_c2r";
  const auto [dims, scale] = check_transform(op, self, dim, kComplex64, normalization, true, last_dim_size);
  const int64_t last = dims.back();
  ETM_REQUIRE(self.sizes[last] >= last_dim_size / 2 + 1, op, ": a real signal of ", last_dim_size,
              " points needs ", last_dim_size / 2 + 1, " input elements along dim ", last, ", got ",
              self.sizes[last]);
  const std::vector<int64_t> rest(dims.begin(), dims.end() - 1);
  std::vector<int64_t> out_sizes = self.sizes;
  out_sizes[last] = last_dim_size;
  // torch's layout: that of a c2c over the other dims, then that of a 1-D transform of its result.
  std::vector<int64_t> spectrum_strides = self.strides;
  if (!rest.empty()) {
    spectrum_strides = fft_output_strides(self.strides, self.sizes, sorted_by_stride(rest, self.strides, false));
  }
  auto out = new_tensor(out_sizes, fft_output_strides(spectrum_strides, out_sizes, {last}), kFloat32);
  if (out->numel() == 0) return out;
  const Tensor* spectrum = &self;
  std::unique_ptr<Tensor> inner;
  if (!rest.empty()) {
    inner = new_tensor(self.sizes, spectrum_strides, kComplex64);
    transform_complex(op, self, *inner, rest, false, 1.0f);
    spectrum = inner.get();
  }
  transform_lines(op, {spectrum, out.get(), last, last_dim_size, last_dim_size, false, scale}, Load::hermitian);
  return out;
}

}  // namespace etm::ops
