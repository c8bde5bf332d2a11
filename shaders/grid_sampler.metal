// grid_sampler_3d (ATen semantics): out[n, c, d, h, w] samples input[n, c] at the point
// grid[n, d, h, w] = (x, y, z) in [-1, 1] (x across W, y across H, z across D). One thread per
// output position, looping over channels.
// Coordinates unnormalize with align_corners (-1 and 1 are the corner voxels' centres) or without
// (the corners' outer edges), then padding mode border clips them into the input and reflection
// reflects them about its edges (then clips). Bilinear (trilinear) weighs the 8 neighbours;
// nearest takes the neighbour rint gives (halves to even); neighbours outside the input count 0.
// Sums run in float32 in ATen's corner order.
#include <metal_stdlib>
using namespace metal;
#include "params/grid_sampler.h"

constant constexpr uint kBorder = 1;
constant constexpr uint kReflection = 2;

inline float reflect(float coordinate, float twice_low, float twice_high) {
  if (twice_low == twice_high) return 0.0f;
  const float low = twice_low / 2, span = (twice_high - twice_low) / 2;
  coordinate = fabs(coordinate - low);
  const float extra = fmod(coordinate, span);
  const int flips = int(floor(coordinate / span));
  return flips % 2 == 0 ? extra + low : span - extra + low;
}

inline float source_index(float coordinate, uint size, constant GridSamplerParams& p) {
  coordinate = p.align_corners ? (coordinate + 1) / 2 * (size - 1) : ((coordinate + 1) * size - 1) / 2;
  if (p.padding_mode == kReflection) {
    coordinate = p.align_corners ? reflect(coordinate, 0, 2 * (float(size) - 1)) : reflect(coordinate, -1, 2 * float(size) - 1);
  }
  if (p.padding_mode == kBorder || p.padding_mode == kReflection) coordinate = min(float(size) - 1, max(coordinate, 0.0f));
  return coordinate;
}

template <typename T>
inline float voxel(const device T* plane, constant GridSamplerParams& p, long z, long y, long x) {
  if (z < 0 || y < 0 || x < 0 || z >= long(p.in_size[0]) || y >= long(p.in_size[1]) || x >= long(p.in_size[2])) {
    return 0.0f;
  }
  return float(plane[z * p.input_strides[2] + y * p.input_strides[3] + x * p.input_strides[4]]);
}

template <typename T>
kernel void grid_sampler_3d(const device T* input [[buffer(0)]], const device T* grid [[buffer(1)]],
                            device T* out [[buffer(2)]], constant GridSamplerParams& p [[buffer(3)]],
                            uint3 position [[thread_position_in_grid]]) {
  const uint w = position.x, h = position.y, n = position.z / p.out_size[0], d = position.z % p.out_size[0];
  const device T* point = grid + long(n) * p.grid_strides[0] + long(d) * p.grid_strides[1] +
                          long(h) * p.grid_strides[2] + long(w) * p.grid_strides[3];
  const float ix = source_index(float(point[0]), p.in_size[2], p);
  const float iy = source_index(float(point[p.grid_strides[4]]), p.in_size[1], p);
  const float iz = source_index(float(point[2 * p.grid_strides[4]]), p.in_size[0], p);
  const long out_plane = long(p.out_size[0]) * p.out_size[1] * p.out_size[2];
  device T* target = out + long(n) * p.channels * out_plane + (long(d) * p.out_size[1] + h) * p.out_size[2] + w;
  const device T* image = input + long(n) * p.input_strides[0];
  if (p.nearest) {
    const long x = long(rint(ix)), y = long(rint(iy)), z = long(rint(iz));
    for (uint c = 0; c < p.channels; ++c) {
      target[long(c) * out_plane] = T(voxel(image + long(c) * p.input_strides[1], p, z, y, x));
    }
    return;
  }
  const float x0 = floor(ix), y0 = floor(iy), z0 = floor(iz);
  const float x1 = x0 + 1, y1 = y0 + 1, z1 = z0 + 1;
  // Corner weights in ATen's order: t(op)/b(ottom) in z, n(orth)/s(outh) in y, w(est)/e(ast) in x.
  const float weights[8] = {(x1 - ix) * (y1 - iy) * (z1 - iz), (ix - x0) * (y1 - iy) * (z1 - iz),
                            (x1 - ix) * (iy - y0) * (z1 - iz), (ix - x0) * (iy - y0) * (z1 - iz),
                            (x1 - ix) * (y1 - iy) * (iz - z0), (ix - x0) * (y1 - iy) * (iz - z0),
                            (x1 - ix) * (iy - y0) * (iz - z0), (ix - x0) * (iy - y0) * (iz - z0)};
  const long xs[2] = {long(x0), long(x1)}, ys[2] = {long(y0), long(y1)}, zs[2] = {long(z0), long(z1)};
  for (uint c = 0; c < p.channels; ++c) {
    const device T* plane = image + long(c) * p.input_strides[1];
    float sum = 0.0f;
    for (int corner = 0; corner < 8; ++corner) {
      sum += voxel(plane, p, zs[corner >> 2], ys[(corner >> 1) & 1], xs[corner & 1]) * weights[corner];
    }
    target[long(c) * out_plane] = T(sum);
  }
}

#define INSTANTIATE_GRID_SAMPLER_3D(T)                                                          \
  template [[host_name("grid_sampler_3d_" #T)]] kernel void grid_sampler_3d<T>(                \
      const device T*, const device T*, device T*, constant GridSamplerParams&, uint3);

INSTANTIATE_GRID_SAMPLER_3D(float)
INSTANTIATE_GRID_SAMPLER_3D(half)
INSTANTIATE_GRID_SAMPLER_3D(bfloat)
