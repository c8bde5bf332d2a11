#include "runtime/tensor.h"

#include <cstring>

#include "runtime/dtype.h"
#include "runtime/error.h"

namespace etm {
namespace {

int64_t checked_multiply(int64_t a, int64_t b) {
  int64_t result;
  ETM_REQUIRE(!__builtin_mul_overflow(a, b, &result), "tensor size computation overflows");
  return result;
}

int64_t checked_add(int64_t a, int64_t b) {
  int64_t result;
  ETM_REQUIRE(!__builtin_add_overflow(a, b, &result), "tensor size computation overflows");
  return result;
}

}  // namespace

int64_t checked_extent(int64_t ndim, const int64_t* sizes, const int64_t* strides,
                       int64_t storage_offset) {
  ETM_REQUIRE(ndim >= 0 && ndim <= 64, "invalid number of dimensions ", ndim);
  ETM_REQUIRE(ndim == 0 || sizes, "sizes pointer is null for a ", ndim, "-dim tensor");
  ETM_REQUIRE(storage_offset >= 0, "negative storage offset ", storage_offset);
  int64_t last = 0;
  for (int64_t d = 0; d < ndim; ++d) {
    ETM_REQUIRE(sizes[d] >= 0, "negative size ", sizes[d], " in dimension ", d);
    if (strides) ETM_REQUIRE(strides[d] >= 0, "negative stride ", strides[d], " in dimension ", d);
  }
  for (int64_t d = 0; d < ndim; ++d)
    if (sizes[d] == 0) return 0;
  int64_t numel = 1;  // numel() multiplies without checks: it must fit here
  for (int64_t d = 0; d < ndim; ++d) numel = checked_multiply(numel, sizes[d]);
  std::vector<int64_t> fallback;
  if (!strides) {
    fallback = contiguous_strides(std::vector<int64_t>(sizes, sizes + ndim));
    strides = fallback.data();
  }
  for (int64_t d = 0; d < ndim; ++d)
    last = checked_add(last, checked_multiply(sizes[d] - 1, strides[d]));
  return checked_add(checked_add(last, 1), storage_offset);
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride = checked_multiply(stride, std::max<int64_t>(sizes[i], 1));
  }
  return strides;
}

size_t storage_nbytes(int64_t extent, int32_t dtype) {
  size_t bytes;
  ETM_REQUIRE(!__builtin_mul_overflow(static_cast<size_t>(extent), element_size(dtype), &bytes),
              "tensor size computation overflows");
  return bytes;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

size_t Tensor::itemsize() const { return element_size(dtype); }

unsigned char* Tensor::data() const {
  unsigned char* base = storage ? storage->data() : nullptr;
  return base ? base + storage_offset * static_cast<int64_t>(itemsize()) : nullptr;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

size_t Tensor::reach_bytes() const {
  const int64_t extent = checked_extent(dim(), sizes.data(), strides.data(), 0);
  return static_cast<size_t>(extent) * itemsize();
}

void copy_elements(const Tensor& dst, const Tensor& src) {
  ETM_REQUIRE(src.dim() <= dst.dim(), "copy_: source has more dimensions (", src.dim(),
              ") than the destination (", dst.dim(), ")");
  const size_t ndim = dst.sizes.size();
  // Broadcast src to dst's shape: align trailing dimensions, stride 0 where src has size 1.
  std::vector<int64_t> src_strides(ndim, 0);
  const size_t lead = ndim - src.sizes.size();
  for (size_t i = 0; i < src.sizes.size(); ++i) {
    const int64_t want = dst.sizes[lead + i];
    const int64_t have = src.sizes[i];
    ETM_REQUIRE(have == want || have == 1, "copy_: source shape does not broadcast to the ",
                "destination shape (dimension ", lead + i, ": ", have, " vs ", want, ")");
    src_strides[lead + i] = have == 1 ? 0 : src.strides[i];
  }
  const int64_t count = dst.numel();
  if (count == 0) return;
  const size_t dst_size = dst.itemsize();
  const size_t src_size = src.itemsize();
  unsigned char* out = dst.data();
  const unsigned char* in = src.data();
  ETM_REQUIRE(out && in, "copy_: tensor without storage");
  if (dst.is_contiguous() && src.dtype == dst.dtype && src.sizes == dst.sizes &&
      src.is_contiguous()) {
    std::memmove(out, in, static_cast<size_t>(count) * dst_size);
    return;
  }
  // Walk dst in row-major order, converting runs along the innermost dimension.
  const int64_t inner = ndim ? dst.sizes[ndim - 1] : 1;
  const int64_t dst_inner_stride = ndim ? dst.strides[ndim - 1] : 1;
  const int64_t src_inner_stride = ndim ? src_strides[ndim - 1] : 1;
  std::vector<int64_t> index(ndim > 0 ? ndim - 1 : 0, 0);
  const bool runs_are_contiguous = dst_inner_stride == 1 && src_inner_stride == 1;
  for (int64_t done = 0; done < count; done += inner) {
    int64_t dst_offset = 0, src_offset = 0;
    for (size_t d = 0; d + 1 < ndim; ++d) {
      dst_offset += index[d] * dst.strides[d];
      src_offset += index[d] * src_strides[d];
    }
    if (runs_are_contiguous) {
      convert_elements(in + src_offset * src_size, src.dtype, out + dst_offset * dst_size,
                       dst.dtype, static_cast<size_t>(inner));
    } else {
      for (int64_t i = 0; i < inner; ++i)
        convert_elements(in + (src_offset + i * src_inner_stride) * src_size, src.dtype,
                         out + (dst_offset + i * dst_inner_stride) * dst_size, dst.dtype, 1);
    }
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < dst.sizes[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace etm
