"""Generates the C entry points of the fallback ops that only forward to the ops layer.

usage: forwarding_shims.py --output FILE --abi SOURCE ... --headers HEADER ...

Every `AOTITorchError aoti_torch_mps_<name>(...)` a public header declares and no source in
native/abi/ defines gets a definition here that decodes its arguments, calls
`etm::ops::<name>` and stores the results, inside the guard every shim uses (a failure returns 1
with the message "<C function>: <op's message>" and poisons the stream). The op's C++
declaration follows from the C one, so the op's .cpp needs no header of its own:

    AtenTensorHandle x                  const etm::Tensor& x
    AtenTensorHandle* x (not retN)      const etm::Tensor* x    (null pointer or handle: none)
    const int64_t* x, int64_t x_len_    std::vector<int64_t> x
    int64_t / int32_t / double x        the same type
    int64_t* / int32_t* / double* x     std::optional of it     (null: none)
    AtenTensorHandle* ret0 .. retN      the result: void, std::unique_ptr<etm::Tensor>, or a
                                        std::tuple of those for two or more

A function whose parameters fall outside these rules needs its shim written by hand in
native/abi/; the generator stops and says so. The output is rewritten only when it changes.
"""
import argparse
import re
import sys
from pathlib import Path

from export_list import declarations_text, without_comments, write_if_changed

PREFIX = "aoti_torch_mps_"
DECLARATION = re.compile(r"\bETMETAL_API\s+AOTITorchError\s+(" + PREFIX + r"\w+)\s*\(([^)]*)\)\s*;")
SCALARS = ("int64_t", "int32_t", "double")


def hand_written(sources) -> tuple:
    """(names, prefixes) of the C functions the abi sources define: every aoti_torch_mps_ name
    they mention, and the prefixes they paste names from (`aoti_torch_mps_x_##N##_y`)."""
    names, prefixes = set(), set()
    for source in sources:
        text = without_comments(source)
        names.update(re.findall(r"\b(" + PREFIX + r"\w*)\b(?!\s*##)", text))
        prefixes.update(re.findall(r"\b(" + PREFIX + r"\w*)\s*##", text))
    return names, prefixes


class Unsupported(Exception):
    """A parameter the forwarding rules do not cover."""


def parameters(text: str) -> list:
    """(type, name) of each parameter, type without spaces before '*'."""
    result = []
    for parameter in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(.*?)\s*(\w+)", parameter.replace("\n", " "))
        if not match:
            raise Unsupported(f"parameter '{parameter}'")
        result.append((re.sub(r"\s*\*", "*", re.sub(r"\s+", " ", match.group(1))), match.group(2)))
    return result


def forwarding_shim(name: str, parameter_text: str) -> tuple:
    """(the op's C++ declaration, the C function's definition)."""
    op = name[len(PREFIX):]
    params = parameters(parameter_text)
    cpp_params, arguments, outputs = [], [], []
    i = 0
    while i < len(params):
        type_, pname = params[i]
        if type_ == "AtenTensorHandle*" and re.fullmatch(r"ret\d+", pname):
            outputs.append(pname)
        elif type_ == "AtenTensorHandle":
            cpp_params.append(f"const Tensor& {pname}")
            arguments.append(f"etm::abi::tensor_of({pname})")
        elif type_ == "AtenTensorHandle*":
            cpp_params.append(f"const Tensor* {pname}")
            arguments.append(f"{pname} && *{pname} ? &etm::abi::tensor_of(*{pname}) : nullptr")
        elif type_ == "const int64_t*" and i + 1 < len(params) and params[i + 1] == ("int64_t", pname + "_len_"):
            cpp_params.append(f"std::vector<int64_t> {pname}")
            arguments.append(f'etm::abi::int_list({pname}, {pname}_len_, "{pname}")')
            i += 1
        elif type_ in SCALARS:
            cpp_params.append(f"{type_} {pname}")
            arguments.append(pname)
        elif type_.endswith("*") and type_[:-1] in SCALARS:
            cpp_params.append(f"std::optional<{type_[:-1]}> {pname}")
            arguments.append(f"{pname} ? std::optional<{type_[:-1]}>(*{pname}) : std::nullopt")
        else:
            raise Unsupported(f"parameter '{type_} {pname}'")
        i += 1
    tensor = "std::unique_ptr<Tensor>"
    result_type = ("void" if not outputs else tensor if len(outputs) == 1
                   else "std::tuple<" + ", ".join([tensor] * len(outputs)) + ">")
    declaration = f"{result_type} {op}({', '.join(cpp_params)});"
    call = f"etm::ops::{op}({', '.join(arguments)})"
    body = [f'    etm::abi::require_out({out}, "{out}");' for out in outputs]
    if not outputs:
        body.append(f"    {call};")
    elif len(outputs) == 1:
        body.append(f"    *{outputs[0]} = etm::abi::new_handle({call});")
    else:
        results = [f"result{n}" for n in range(len(outputs))]
        body.append(f"    auto [{', '.join(results)}] = {call};")
        body += [f"    *{out} = etm::abi::new_handle(std::move({r}));" for out, r in zip(outputs, results)]
    c_params = ", ".join(" ".join(p) for p in params)
    definition = (f'extern "C" AOTITorchError {name}({c_params}) {{\n'
                  f"  return etm::abi::guarded_encoding(__func__, [&] {{\n" + "\n".join(body) + "\n  });\n}\n")
    return declaration, definition


def generate(headers, abi_sources) -> str:
    names, prefixes = hand_written(abi_sources)
    includes, declarations, definitions = [], [], []
    for header in sorted(headers, key=lambda h: Path(h).name):
        for name, parameter_text in DECLARATION.findall(declarations_text(header)):
            if name in names or any(name.startswith(p) for p in prefixes):
                continue
            try:
                declaration, definition = forwarding_shim(name, parameter_text)
            except Unsupported as problem:
                raise SystemExit(f"forwarding_shims.py: {Path(header).name} declares {name}, which no source in "
                                 f"native/abi/ defines, and its {problem} has no forwarding rule: write its shim "
                                 f"by hand in native/abi/ (shaders/README.md, 'Adding an op')")
            include = f'#include "etmetal/{Path(header).name}"'
            if include not in includes:
                includes.append(include)
            declarations.append(declaration)
            definitions.append(definition)
    lines = ["// Generated by native/forwarding_shims.py from the public headers. Do not edit.",
             "#include <memory>", "#include <optional>", "#include <tuple>", "#include <utility>", "#include <vector>", "",
             '#include "abi/guard.h"', '#include "abi/shim_arguments.h"', *includes, '#include "runtime/tensor.h"', ""]
    if declarations:
        lines += ["namespace etm::ops {", *declarations, "}  // namespace etm::ops", "", ""]
    return "\n".join(lines) + "\n".join(definitions)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True)
    parser.add_argument("--abi", nargs="+", required=True)
    parser.add_argument("--headers", nargs="+", required=True)
    args = parser.parse_args()
    write_if_changed(args.output, generate(args.headers, args.abi))
    return 0


if __name__ == "__main__":
    sys.exit(main())
