"""A compiled model that reaches the 3-D sampling and distance fallbacks through their C shims
(Inductor leaves grid_sampler_3d and _cdist_forward to them; it decomposes 3-D pooling and max
unpooling itself), run through libetmetal against torch eager on CPU. Slow: one AOTI compile
(about a minute and a half on two cores). The direct tests are in test_geometry.py."""

import pytest
import torch
import torch.nn.functional as F

from ops_testing import compile_and_load


class VolumeModel(torch.nn.Module):
    """A spatial transformer over a volume (grid_sample on 5-D input, as 3-D registration and
    video models use it) and nearest-neighbour distances between point sets (cdist)."""

    def forward(self, volume, offsets, points, centres):
        grid = torch.tanh(offsets) * 1.2  # reaches past the volume: the padding modes matter
        warped = F.grid_sample(volume, grid, mode="bilinear", padding_mode="border", align_corners=False)
        nearest = F.grid_sample(volume * 2, grid, mode="nearest", padding_mode="zeros", align_corners=True)
        distances = torch.cdist(points, centres)
        manhattan = torch.cdist(points, centres, p=1.0)
        return warped, nearest, distances, manhattan, distances.argmin(-1)


def inputs(seed):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 3, 5, 6, 7, generator=generator), torch.randn(2, 4, 5, 3, 3, generator=generator),
            torch.randn(2, 30, 4, generator=generator), torch.randn(2, 9, 4, generator=generator))


@pytest.mark.slow
def test_compiled_model_reaches_grid_sampler_3d_and_cdist(tmp_path):
    model = VolumeModel()
    runner = compile_and_load(model, inputs(0), tmp_path,
                              ["aoti_torch_mps_grid_sampler_3d", "aoti_torch_mps__cdist_forward"])
    for seed in (1, 2):
        args = inputs(seed)
        got = runner(*args)
        want = model(*args)
        assert len(got) == len(want)
        for actual, expected in zip(got[:-1], want[:-1]):
            # eager's cdist takes the mm route for 30 x 9 points: a few ulps apart from the direct sum
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
        assert torch.equal(got[-1], want[-1])
