"""One compiled model that reaches the fallback ops Inductor leaves to C shims (one compile for
all of them), run through libetmetal against torch eager on CPU:

- indexing: a bool-mask gather (index.Tensor), a bool-mask index_put and an int64 index_put
  with accumulate (index_put_out), a non-sum scatter_reduce and an int64 scatter_add
  (scatter_reduce_two_out "sum"), an int64 scatter (scatter_src_out), embedding bags (max; mean
  with padding), masked_scatter as VLMs merge image embeddings, index_reduce;
- order statistics: kthvalue, median, nanmedian;
- pooling: an average pool with overlapping windows of more than 25 elements, adaptive average
  and max pools with windows of more than 25 elements;
- a top-1 mixture-of-experts block in bfloat16 as transformers' grouped_mm experts path runs it
  (histc counts, expert weights [E, out, in] transposed): _grouped_mm;
- random numbers (rand_like, randn): Inductor generates their kernels and draws the kernels'
  seeds with randint_low_out; checked by statistics, and fresh on each run.

The direct tests of each op (dtypes, strides, bad input) are in test_indexing.py,
test_order_statistics.py, test_pooling.py, test_grouped_mm.py and test_random.py."""

import torch
import torch.nn.functional as F

from ops_testing import assert_close_scaled, compile_and_load


class MoEExperts(torch.nn.Module):
    def __init__(self, experts=4, dim=32, hidden=48):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.router = torch.nn.Parameter(torch.randn(experts, dim, generator=generator).bfloat16())
        self.up = torch.nn.Parameter((torch.randn(experts, hidden, dim, generator=generator) / dim ** 0.5).bfloat16())
        self.down = torch.nn.Parameter((torch.randn(experts, dim, hidden, generator=generator) / hidden ** 0.5)
                                       .bfloat16())

    def forward(self, x):
        expert = (x @ self.router.t()).argmax(-1)
        order = expert.argsort(stable=True)
        experts = self.up.shape[0]
        counts = torch.histc(expert.float(), bins=experts, min=0, max=experts - 1)
        ends = counts.cumsum(0).to(torch.int32)
        hidden = F.silu(torch._grouped_mm(x[order], self.up.transpose(-2, -1), offs=ends))
        out = torch._grouped_mm(hidden, self.down.transpose(-2, -1), offs=ends)
        return torch.empty_like(out).index_copy(0, order, out)


class Fallbacks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bag_max = torch.nn.EmbeddingBag(10, 4, mode="max")
        self.bag_mean = torch.nn.EmbeddingBag(10, 4, mode="mean", padding_idx=3)
        self.register_buffer("bag_offsets", torch.tensor([0, 2]))
        self.experts = MoEExperts()

    def indexing(self, x, mask, rows, index_tensor, src, counts):
        picked = x[mask]
        masked = x.index_put((mask,), torch.arange(x.shape[1], dtype=x.dtype) * 0.5)
        histogram = counts.index_put((rows,), torch.ones_like(rows), accumulate=True)
        amax = x.scatter_reduce(0, index_tensor, src, "amax", include_self=False)
        sums = counts.unsqueeze(0).expand(2, -1).scatter_add(1, index_tensor[:2] % counts.numel(),
                                                             rows[:index_tensor.shape[1]].expand(2, -1))
        filled = counts.scatter(0, rows[:5], rows[:5] * 3)
        bags = self.bag_max(counts, self.bag_offsets) + self.bag_mean(counts.view(1, 5))
        merged = x.masked_scatter(mask.unsqueeze(-1), x.flip(0) * 3)
        reduced = x.index_reduce(0, rows[:4], x[:4] * 2, "amax")
        return picked * 2, masked, histogram, amax, sums, filled, bags, merged, reduced

    def order_statistics(self, image):
        kth = torch.kthvalue(image.flatten(2), 5, dim=-1)
        adaptive_max, where = F.adaptive_max_pool2d(image, (3, 3), return_indices=True)
        return kth.values, torch.median(image), torch.nanmedian(image[0]), where, adaptive_max

    def pooling(self, image):
        return F.avg_pool2d(image, 6, stride=2, padding=1), F.adaptive_avg_pool2d(image, (3, 3))

    def forward(self, x, mask, rows, index_tensor, src, counts, image, tokens):
        return (*self.indexing(x, mask, rows, index_tensor, src, counts), *self.order_statistics(image),
                *self.pooling(image), self.experts(tokens),
                torch.rand_like(image) * 2 + image, torch.randn(RANDOM_NUMEL))


C_FUNCTIONS = ["aoti_torch_mps_index_Tensor", "aoti_torch_index_put_out", "aoti_torch_mps_scatter_reduce_two_out",
               "aoti_torch_mps_scatter_src_out", "aoti_torch_mps__embedding_bag_forward_only",
               "aoti_torch_mps_masked_scatter", "aoti_torch_mps_index_reduce", "aoti_torch_mps_kthvalue",
               "aoti_torch_mps_median", "aoti_torch_mps_nanmedian", "aoti_torch_mps_adaptive_max_pool2d",
               "aoti_torch_mps_avg_pool2d", "aoti_torch_mps__adaptive_avg_pool2d", "aoti_torch_mps__grouped_mm",
               "aoti_torch_mps_randint_low_out"]
EXACT_OUTPUTS = 14  # indexing and order statistics; then float pools and the bfloat16 experts
RANDOM_OUTPUTS = 2  # last: uniform [0, 2) noise added to the image, standard normal numbers
RANDOM_NUMEL = 20_000


def inputs(seed):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(6, 4, generator=generator), torch.rand(6, generator=generator) > 0.4,
            torch.randint(0, 5, (9,), generator=generator), torch.randint(0, 6, (3, 4), generator=generator),
            torch.randn(3, 4, generator=generator), torch.randint(0, 10, (5,), generator=generator),
            torch.randn(2, 3, 14, 14, generator=generator),
            torch.randn(20, 32, generator=generator).bfloat16())


def check_random_outputs(image, noisy, normal):
    noise = noisy - image
    assert noise.shape == image.shape and float(noise.min()) >= 0 and float(noise.max()) < 2 + 1e-5
    assert abs(float(noise.mean()) - 1) < 0.05
    assert normal.shape == (RANDOM_NUMEL,)
    assert abs(float(normal.mean())) < 0.05 and abs(float(normal.std()) - 1) < 0.05


def test_compiled_model_reaches_the_fallbacks_and_matches_eager(tmp_path):
    model = Fallbacks()
    runner = compile_and_load(model, inputs(11), tmp_path, C_FUNCTIONS)
    normals = []
    for seed in (12, 13):
        args = inputs(seed)
        got = runner(*args)
        with torch.no_grad():
            want = model(*args)
        assert len(got) == len(want)
        check_random_outputs(args[6], *got[-RANDOM_OUTPUTS:])
        normals.append(got[-1])
        for index, (actual, expected) in enumerate(zip(got[:-RANDOM_OUTPUTS], want[:-RANDOM_OUTPUTS])):
            if index < EXACT_OUTPUTS:
                assert actual.dtype == expected.dtype and torch.equal(actual, expected), index
            elif expected.dtype == torch.bfloat16:
                assert_close_scaled(actual, expected, 3e-2, same_dtype=True)
            else:
                torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6)
    assert not torch.equal(normals[0], normals[1])  # each run draws fresh seeds
