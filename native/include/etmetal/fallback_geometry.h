/* Sampling and distance fallbacks of AOTInductor's Metal shim (torch 2.13 c_shim_mps.h), same
 * names and signatures, ATen semantics (at::grid_sampler_3d, at::_cdist_forward,
 * at::_pdist_forward).
 *
 * The work is encoded on the calling thread's stream and runs in stream order: the call
 * returns before it has run, and inputs must stay alive until the stream has finished. A
 * failure returns 1, sets etmetal_last_error() and poisons the calling thread's stream. */
#ifndef ETMETAL_FALLBACK_GEOMETRY_H
#define ETMETAL_FALLBACK_GEOMETRY_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* Samples input [N, C, D, H, W] at the points grid [N, D', H', W', 3] = (x, y, z) in [-1, 1]
 * (x across W, y across H, z across D): *ret0 a new contiguous [N, C, D', H', W']. Input and grid
 * share a floating dtype (float32, float16, bfloat16), any strides. interpolation_mode 0
 * bilinear (trilinear), 1 nearest (bicubic exists for 4-D inputs only); padding_mode 0 zeros,
 * 1 border, 2 reflection; align_corners != 0 maps -1 and 1 to the corner voxels' centres. */
ETMETAL_API AOTITorchError aoti_torch_mps_grid_sampler_3d(AtenTensorHandle input, AtenTensorHandle grid,
                                                          int64_t interpolation_mode, int64_t padding_mode,
                                                          int32_t align_corners, AtenTensorHandle* ret0);

/* Pairwise p-norm distances between the rows of x1 [*, P, M] and x2 [*, R, M]: *ret0 a new
 * contiguous [*, P, R] (batch dimensions broadcast, at most 6). One floating dtype (float32,
 * float16, bfloat16), any strides, float32 accumulation. p >= 0; p 0 counts differing columns,
 * p infinity takes the largest difference. compute_mode is null or points to 0, 1 or 2; every
 * mode computes the differences directly (torch's mm-based modes round differently). */
ETMETAL_API AOTITorchError aoti_torch_mps__cdist_forward(AtenTensorHandle x1, AtenTensorHandle x2, double p,
                                                         int64_t* compute_mode, AtenTensorHandle* ret0);

/* torch.nn.functional.pdist: *ret0 a new contiguous [N * (N - 1) / 2] holding the p-norm distance
 * of every pair of rows i < j of self [N, M], row by row (pair (0, 1) first). One floating dtype
 * (float32, float16, bfloat16), any strides, float32 accumulation; p >= 0 as for _cdist_forward.
 * Not in torch 2.13's C shims (etmetal_py registers it with Inductor, which calls it with the
 * signature it derives from the op's schema). */
ETMETAL_API AOTITorchError aoti_torch_mps__pdist_forward(AtenTensorHandle self, double p, AtenTensorHandle* ret0);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_GEOMETRY_H */
