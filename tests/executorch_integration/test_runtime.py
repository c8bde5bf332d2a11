"""Metal `.pte` programs exported with ExecuTorch's MetalBackend (etmetal's compile patches) and
run by ExecuTorch's own runtime through libetmetal_executorch, against torch eager."""

from __future__ import annotations

import gc
import hashlib
import threading

import pytest
import torch

from executorch_testing import LinearNorm, Mixed, TwoOutputs, rewrite_pte, runtime
from etmetal_py.executorch.pte import metal_delegates

import etmetal_py
from etmetal_testing import allocator_stats, assert_host_memory_flat, host_mappings_and_rss


def test_the_pte_has_executorch_metal_layout(programs):
    from executorch.backends.apple.metal.metal_backend import MetalBackend

    delegates = metal_delegates(programs.get("two_methods"))
    # The export's patches were scoped: MetalBackend has only its own attributes again.
    assert "move_program_to_device" not in MetalBackend.__dict__
    assert "get_extra_aoti_compile_context_manager" not in MetalBackend.__dict__
    assert [d.method for d in delegates] == ["forward", "two_outputs"]
    for delegate in delegates:
        so_key, weights_key = delegate.processed.decode().split("\n")
        assert delegate.compile_specs == {"method_name": delegate.method.encode()}
        so, weights = delegate.named_data[so_key], delegate.named_data[weights_key]
        assert so_key == hashlib.sha256(so).hexdigest() + "_so_blob"
        assert weights_key == hashlib.sha256(weights).hexdigest() + "_weights_blob"
        assert so[:4] == b"\x7fELF" or so[:4] in (b"\xcf\xfa\xed\xfe",)  # host library
    forward, two_outputs = delegates
    # LinearNorm's weights: 8x16 + 16 (linear) + 16 + 16 (norm) float32, padded by Inductor.
    assert len(forward.named_data[forward.keys[1]]) >= (8 * 16 + 16 * 3) * 4
    assert len(two_outputs.named_data[two_outputs.keys[1]]) == 0


def test_methods_match_eager_with_dynamic_output_shapes(programs):
    program = runtime().load_program(programs.get("two_methods"))
    assert set(program.method_names) == {"forward", "two_outputs"}
    forward = program.load_method("forward")
    model = LinearNorm().eval()
    for batch in (4, 1, 17):
        x = torch.randn(batch, 8)
        (y,) = forward.execute([x])
        assert y.shape == (batch, 16)
        torch.testing.assert_close(y, model(x), atol=1e-5, rtol=1e-5)
    x = torch.randn(3, 5)
    scaled, summed = program.load_method("two_outputs").execute([x])
    expected = TwoOutputs()(x)
    torch.testing.assert_close(scaled, expected[0])
    torch.testing.assert_close(summed, expected[1], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_several_delegates_in_one_method_beside_another_backend(programs):
    path = programs.get("mixed")
    delegates = metal_delegates(path)
    assert len(delegates) == 2 and len({d.keys[0] for d in delegates}) == 2
    program = runtime().load_program(path)
    method = program.load_method("forward")
    x = torch.randn(4, 8)
    (y,) = method.execute([x])
    torch.testing.assert_close(y, Mixed().eval()(x), atol=1e-4, rtol=1e-4)
    # A second program of the same file: its own model libraries, both keep working.
    other = runtime().load_program(path).load_method("forward")
    (again,) = other.execute([x])
    torch.testing.assert_close(again, y)
    del method, program
    gc.collect()
    (after,) = other.execute([x])
    torch.testing.assert_close(after, y)


def test_two_programs_in_two_threads_and_destroying_one_leaves_the_other(programs):
    rt = runtime()
    path = programs.get("two_methods")
    first = rt.load_program(path).load_method("forward")
    second = rt.load_program(path).load_method("two_outputs")
    model = LinearNorm().eval()

    def mixed(x):
        return TwoOutputs()(x)[0]
    failures: list[BaseException] = []

    def run(method, reference, shape, rounds=6):
        try:
            for _ in range(rounds):
                x = torch.randn(*shape)
                y = method.execute([x])[0]
                torch.testing.assert_close(y, reference(x), atol=1e-4, rtol=1e-4)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(first, model, (5, 8))),
               threading.Thread(target=run, args=(second, mixed, (3, 5)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    del first
    gc.collect()
    run(second, mixed, (3, 5), rounds=2)
    assert not failures, failures


def test_load_run_destroy_cycles_keep_device_memory_flat(programs):
    rt = runtime()
    path = programs.get("two_methods")
    x = torch.randn(2, 8)
    expected = LinearNorm().eval()(x)

    def cycle():
        method = rt.load_program(path).load_method("forward")
        (y,) = method.execute([x])
        torch.testing.assert_close(y, expected, atol=1e-5, rtol=1e-5)
        del method
        gc.collect()
        etmetal_py.synchronize()

    # A leak of device memory shows after one cycle; 20 cycles of a leaked mapping (about six
    # per load) stand well above the host check's allowance of 10.
    for _ in range(3):
        cycle()
    settled = allocator_stats()
    host_before = host_mappings_and_rss()
    for _ in range(20):
        cycle()
    after = allocator_stats()
    assert (after.live_bytes, after.live_allocations) == \
        (settled.live_bytes, settled.live_allocations)
    assert_host_memory_flat(host_before, "20 load/run/destroy cycles")


def _forward_processed(program):
    plan = next(p for p in program.execution_plan if p.name == "forward")
    return program.backend_delegate_data[plan.delegates[0].processed.index]


def _forward_keys(program) -> list[str]:
    return bytes(_forward_processed(program).data).decode().split("\n")


def _damage(which: int, make):
    """Replaces the forward delegate's .so (0) or weights (1) with make(bytes) (None: drops)."""
    def change(program, named):
        key = _forward_keys(program)[which]
        replacement = make(named[key])
        if replacement is None:
            del named[key]
        else:
            named[key] = replacement
    return change


def _rename_weights(program, named):
    so_key = _forward_keys(program)[0]
    _forward_processed(program).data = (so_key + "\n" + "0" * 64 + "_weights_blob").encode()


def _garble_processed(program, named):
    _forward_processed(program).data = b"not a key"


BAD_PROGRAMS = {
    "missing_so": _damage(0, lambda data: None),
    "truncated_so": _damage(0, lambda data: data[:len(data) // 3]),
    "corrupt_so": _damage(0, lambda data: bytes(len(data))),
    "missing_weights": _rename_weights,
    "short_weights": _damage(1, lambda data: data[:len(data) // 2]),
    "bad_processed_bytes": _garble_processed,
}


@pytest.mark.parametrize("damage", sorted(BAD_PROGRAMS))
def test_a_damaged_pte_fails_to_load_cleanly(programs, tmp_path, damage):
    path = rewrite_pte(programs.get("two_methods"), str(tmp_path / f"{damage}.pte"),
                       BAD_PROGRAMS[damage])
    program = runtime().load_program(path)
    with pytest.raises(RuntimeError):
        program.load_method("forward")
    # The process and the program's other method are unharmed.
    x = torch.randn(3, 5)
    scaled, _ = program.load_method("two_outputs").execute([x])
    torch.testing.assert_close(scaled, x * 3.0 - 1.0)
