"""native/forwarding_shims.py, which writes the C entry point of every fallback op that a
public header declares and no native/abi/ source defines (the build compiles its output, and
the ops tests call the functions): which functions it takes, the C++ signature it derives, and
its refusal of a parameter it has no rule for."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "native" / "forwarding_shims.py"

HEADER = """/* one op forwarded, three written by hand */
ETMETAL_API AOTITorchError aoti_torch_mps_fold(AtenTensorHandle self, AtenTensorHandle* bias,
                                               const int64_t* sizes, int64_t sizes_len_, double p,
                                               int32_t* dtype, AtenTensorHandle* ret0, AtenTensorHandle* ret1);
ETMETAL_API AOTITorchError aoti_torch_mps_by_hand(AtenTensorHandle self, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_pasted_2bit(AtenTensorHandle self, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_fill_(AtenTensorHandle self, double value);
ETMETAL_API void aoti_torch_mps_not_an_op(int32_t x);
"""
ABI = """// aoti_torch_mps_fill_ is named in a comment only: not a definition
extern "C" AOTITorchError aoti_torch_mps_by_hand(AtenTensorHandle self, AtenTensorHandle* ret0) { return 0; }
#define PASTED(N) extern "C" AOTITorchError aoti_torch_mps_pasted_##N##bit(AtenTensorHandle, AtenTensorHandle*);
"""


def generate(tmp_path, header=HEADER):
    (tmp_path / "fallback_test.h").write_text(header)
    (tmp_path / "test_shims.cpp").write_text(ABI)
    output = tmp_path / "forwarding_shims.cpp"
    run = subprocess.run([sys.executable, str(SCRIPT), "--output", str(output), "--abi",
                          str(tmp_path / "test_shims.cpp"), "--headers", str(tmp_path / "fallback_test.h")],
                         capture_output=True, text=True)
    return run, output.read_text() if output.exists() else ""


def test_forwards_the_declared_functions_no_abi_source_defines(tmp_path):
    run, text = generate(tmp_path)
    assert run.returncode == 0, run.stderr
    assert '#include "etmetal/fallback_test.h"' in text
    assert ("std::tuple<std::unique_ptr<Tensor>, std::unique_ptr<Tensor>> fold(const Tensor& self, "
            "const Tensor* bias, std::vector<int64_t> sizes, double p, std::optional<int32_t> dtype);") in text
    assert "void fill_(const Tensor& self, double value);" in text
    assert ('etm::ops::fold(etm::abi::tensor_of(self), bias && *bias ? &etm::abi::tensor_of(*bias) : nullptr, '
            'etm::abi::int_list(sizes, sizes_len_, "sizes"), p, '
            'dtype ? std::optional<int32_t>(*dtype) : std::nullopt)') in text
    assert 'etm::abi::require_out(ret1, "ret1");' in text
    assert "etm::abi::guarded_encoding(__func__" in text
    for written_elsewhere in ("by_hand", "pasted_2bit", "not_an_op"):
        assert f"aoti_torch_mps_{written_elsewhere}" not in text


def test_refuses_a_parameter_without_a_rule(tmp_path):
    run, _ = generate(tmp_path, HEADER + "ETMETAL_API AOTITorchError aoti_torch_mps_named(const char* name);\n")
    assert run.returncode == 1
    assert "aoti_torch_mps_named" in run.stderr and "const char* name" in run.stderr
    assert "write its shim by hand in native/abi/" in run.stderr


def test_the_librarys_headers_have_a_rule_for_every_forwarded_parameter(tmp_path):
    headers = sorted(str(p) for p in (ROOT / "native" / "include" / "etmetal").glob("*.h"))
    abi = sorted(str(p) for p in (ROOT / "native" / "abi").glob("*.cpp"))
    output = tmp_path / "forwarding_shims.cpp"
    run = subprocess.run([sys.executable, str(SCRIPT), "--output", str(output), "--abi", *abi, "--headers", *headers],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    text = output.read_text()
    assert text.count('extern "C" AOTITorchError aoti_torch_mps_') == text.count("etm::ops::")
