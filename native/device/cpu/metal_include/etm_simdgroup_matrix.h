// metal_simdgroup_matrix: 8x8 matrices spread over the 32 lanes of a simdgroup.
//
// Each lane holds two elements, the documented thread_elements() fragment: lane l holds row
// (q & 4) + (l / 2) % 4, columns c and c + 1 with c = (q & 2) * 2 + (l % 2) * 2, q = l / 4.
// Loads and stores touch only the caller's two elements; a multiply exchanges the operand
// fragments through the simd exchange, and every lane reads the row of a and the columns of b
// that its own two results need.
#pragma once

#include "etm_simd.h"

namespace etm_msl {

struct fragment_position {
  uint32_t row;
  uint32_t column;  // of the first of the lane's two elements
};
constexpr fragment_position fragment_of_lane(uint32_t lane) {
  const uint32_t quad = lane / 4;
  return {(quad & 4u) + (lane / 2) % 4, (quad & 2u) * 2 + (lane % 2) * 2};
}

// The inverse: which lane holds element (row, column), and as which of its two elements.
struct fragment_slots {
  uint8_t lane[8][8];
  uint8_t element[8][8];
};
constexpr fragment_slots make_fragment_slots() {
  fragment_slots slots{};
  for (uint32_t lane = 0; lane < 32; ++lane) {
    const fragment_position at = fragment_of_lane(lane);
    for (uint32_t k = 0; k < 2; ++k) {
      slots.lane[at.row][at.column + k] = uint8_t(lane);
      slots.element[at.row][at.column + k] = uint8_t(k);
    }
  }
  return slots;
}
inline constexpr fragment_slots kFragmentSlots = make_fragment_slots();

}  // namespace etm_msl

namespace metal {

template <class T, int Columns, int Rows>
struct simdgroup_matrix {
  static_assert(Columns == 8 && Rows == 8, "simdgroup_matrix is 8x8");
  static_assert(std::is_same<T, float>::value || std::is_same<T, half>::value || std::is_same<T, bfloat>::value,
                "simdgroup_matrix holds float, half or bfloat");

  simdgroup_matrix() = default;
  // A diagonal matrix with `diagonal` on the diagonal, zero elsewhere (a collective).
  explicit simdgroup_matrix(T diagonal, ETM_CALL_SITE_PARAMETER) {
    const etm_msl::fragment_position at = etm_msl::fragment_of_lane(etm_msl::current_lane(ETM_CALL_SITE));
    elements.x = at.row == at.column ? diagonal : T(0);
    elements.y = at.row == at.column + 1 ? diagonal : T(0);
  }

  vec<T, 2>& thread_elements() { return elements; }
  const vec<T, 2>& thread_elements() const { return elements; }

  vec<T, 2> elements;
};

typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

// Rows defaults to Columns: make_filled_simdgroup_matrix<float, 8>(0.f) (llama.cpp's and
// PyTorch's quantized kernels).
template <class T, int Columns, int Rows = Columns>
inline simdgroup_matrix<T, Columns, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Columns, Rows> matrix;
  matrix.elements = vec<T, 2>(value, value);
  return matrix;
}

}  // namespace metal

namespace etm_msl {
template <class TD, class TA, class TB, class TC>
inline void multiply_accumulate(const call_site& site, metal::simdgroup_matrix<TD, 8, 8>& d,
                                const metal::simdgroup_matrix<TA, 8, 8>& a, const metal::simdgroup_matrix<TB, 8, 8>& b,
                                const etm_vec::vector<TC, 2, false>& addend) {
  struct operands {
    float a[2];
    float b[2];
  };
  const operands mine{{float(a.elements.x), float(a.elements.y)}, {float(b.elements.x), float(b.elements.y)}};
  const lane_values view = publish(site, mine);
  // Each lane reads the sixteen operand elements its two results need straight from the
  // exchanged fragments (elements of lanes outside the view read as zero).
  const auto element_at = [&](size_t operand_offset, uint32_t row, uint32_t column) {
    const uint32_t lane = kFragmentSlots.lane[row][column];
    if (lane >= view.width) return 0.0f;
    float value;
    __builtin_memcpy(&value, view.values + size_t(lane) * sizeof(operands) + operand_offset +
                                 kFragmentSlots.element[row][column] * sizeof(float),
                     sizeof value);
    return value;
  };
  const auto a_at = [&](uint32_t row, uint32_t column) { return element_at(offsetof(operands, a), row, column); };
  const auto b_at = [&](uint32_t row, uint32_t column) { return element_at(offsetof(operands, b), row, column); };
  const fragment_position at = fragment_of_lane(view.lane);
  for (uint32_t k = 0; k < 2; ++k) {
    float sum = float(addend[int(k)]);
    for (uint32_t i = 0; i < 8; ++i) sum += a_at(at.row, i) * b_at(i, at.column + k);
    d.elements[int(k)] = TD(sum);
  }
}
}  // namespace etm_msl

namespace metal {

// Element (r, c) comes from source[(origin.y + r) * elements_per_row + origin.x + c], or with
// transpose from the source's (c, r).
template <class T, int Columns, int Rows, class S>
inline void simdgroup_load(simdgroup_matrix<T, Columns, Rows>& destination, const S* source,
                           ulong elements_per_row = Columns, ulong2 matrix_origin = ulong2(0ul, 0ul),
                           bool transpose_matrix = false, ETM_CALL_SITE_PARAMETER) {
  const etm_msl::fragment_position at = etm_msl::fragment_of_lane(etm_msl::current_lane(ETM_CALL_SITE));
  for (uint32_t k = 0; k < 2; ++k) {
    const ulong row = at.row, column = at.column + k;
    const ulong source_row = transpose_matrix ? column : row;
    const ulong source_column = transpose_matrix ? row : column;
    destination.elements[int(k)] =
        T(source[(matrix_origin.y + source_row) * elements_per_row + matrix_origin.x + source_column]);
  }
}

template <class T, int Columns, int Rows, class D>
inline void simdgroup_store(const simdgroup_matrix<T, Columns, Rows>& matrix, D* destination,
                            ulong elements_per_row = Columns, ulong2 matrix_origin = ulong2(0ul, 0ul),
                            bool transpose_matrix = false, ETM_CALL_SITE_PARAMETER) {
  const etm_msl::fragment_position at = etm_msl::fragment_of_lane(etm_msl::current_lane(ETM_CALL_SITE));
  for (uint32_t k = 0; k < 2; ++k) {
    const ulong row = at.row, column = at.column + k;
    const ulong target_row = transpose_matrix ? column : row;
    const ulong target_column = transpose_matrix ? row : column;
    destination[(matrix_origin.y + target_row) * elements_per_row + matrix_origin.x + target_column] =
        D(matrix.elements[int(k)]);
  }
}

// d = a * b + c, accumulated in float.
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c,
                                          ETM_CALL_SITE_PARAMETER) {
  etm_msl::multiply_accumulate(ETM_CALL_SITE, d, a, b, c.elements);
}

template <class TD, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                               const simdgroup_matrix<TB, 8, 8>& b, ETM_CALL_SITE_PARAMETER) {
  etm_msl::multiply_accumulate(ETM_CALL_SITE, d, a, b, float2(0.0f, 0.0f));
}

// a * b, a collective like simdgroup_multiply. An operator cannot take the caller's location,
// so every `*` shares one call site: lanes must not diverge between two of them.
template <class T>
inline simdgroup_matrix<T, 8, 8> operator*(const simdgroup_matrix<T, 8, 8>& a, const simdgroup_matrix<T, 8, 8>& b) {
  simdgroup_matrix<T, 8, 8> product;
  etm_msl::multiply_accumulate(etm_msl::call_site{__FILE__, __LINE__, 0u}, product, a, b, float2(0.0f, 0.0f));
  return product;
}

}  // namespace metal
