/* Mixture-of-experts ops of other libraries that etmetal implements, so that models calling
 * them compile for "mps" (etmetal_py registers the C shim with AOTInductor).
 *
 * transformers' default experts path ("grouped_mm") calls its custom op
 * transformers::grouped_mm_fallback whenever torch._grouped_mm cannot take the weights (on CPU,
 * which is what tracing on a host without MPS sees, and for every dtype but bfloat16 under
 * torch.compile / export). A failure returns 1, sets etmetal_last_error(), poisons the calling
 * thread's stream and leaves *ret0 untouched. */
#ifndef ETMETAL_FALLBACK_EXPERTS_H
#define ETMETAL_FALLBACK_EXPERTS_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* transformers::grouped_mm_fallback (Inductor names a custom op's C function after the op alone,
 * without its namespace)(input [S, K], weight [E, K, N], offs [E]) -> [S, N]: rows
 * offs[e-1] .. offs[e] of input (sorted by expert) times weight[e]; rows past the last offset
 * are zeros. input and weight of one float dtype (float32, float16, bfloat16), any strides;
 * offs int32 running ends. */
ETMETAL_API AOTITorchError aoti_torch_mps_grouped_mm_fallback(AtenTensorHandle input,
                                                                           AtenTensorHandle weight,
                                                                           AtenTensorHandle offs,
                                                                           AtenTensorHandle* ret0);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_EXPERTS_H */
