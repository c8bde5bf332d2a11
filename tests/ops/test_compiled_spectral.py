"""A compiled model that reaches the complex and FFT fallbacks through their C shims (Inductor
generates no code for complex operators: every one is a fallback call), run through libetmetal
against torch eager on CPU. Slow: one AOTI compile (about a minute on two cores). The direct
tests are in test_spectral.py."""

import pytest
import torch

from ops_testing import compile_and_load


class SpectralModel(torch.nn.Module):
    """FFT convolution (rfft, multiply, irfft: long-convolution layers), Fourier token mixing
    (FNet's fft2, real part), Llama's original rotary embedding (polar, view_as_complex, complex
    multiply, view_as_real) and a log-mel spectrogram (stft with a Hann window, |X|^2 of a
    strided complex slice, as speech front ends compute it)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(64))
        self.register_buffer("filters", torch.rand(20, 33, generator=torch.Generator().manual_seed(9)))

    def forward(self, x, kernel, q, angles, audio):
        n = x.shape[-1]
        spectrum = torch.fft.rfft(x, n=2 * n) * torch.fft.rfft(kernel, n=2 * n)
        convolved = torch.fft.irfft(spectrum, n=2 * n)[..., :n]
        mixed = torch.fft.fft2(x.to(torch.complex64), norm="ortho").real
        rotation = torch.polar(torch.ones_like(angles), angles)
        pairs = torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2))
        rotated = torch.view_as_real(pairs * rotation).flatten(-2)
        spectrum = torch.stft(audio, 64, hop_length=16, window=self.window, return_complex=True)
        mel = torch.log10(torch.clamp(self.filters @ spectrum[..., :-1].abs() ** 2, min=1e-10))
        return convolved, mixed, rotated, mel


def inputs(seed):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 3, 20, generator=generator), torch.randn(3, 20, generator=generator),
            torch.randn(2, 5, 8, generator=generator), torch.rand(5, 4, generator=generator) * 6,
            torch.randn(2, 800, generator=generator))


@pytest.mark.slow
def test_compiled_model_reaches_fft_and_complex_shims(tmp_path):
    model = SpectralModel()
    runner = compile_and_load(model, inputs(0), tmp_path,
                              ["aoti_torch_mps__fft_r2c", "aoti_torch_mps__fft_c2r", "aoti_torch_mps__fft_c2c",
                               "aoti_torch_mps_polar", "aoti_torch_mps_view_as_complex",
                               "aoti_torch_mps_view_as_real", "aoti_torch_mps_mul_Tensor", "aoti_torch_mps_abs"])
    for seed in (1, 2):
        args = inputs(seed)
        got = runner(*args)
        want = model(*args)
        assert len(got) == len(want)
        for actual, expected in zip(got, want):
            assert actual.dtype == expected.dtype and actual.shape == expected.shape
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
