"""ExecuTorch integration: export Metal `.pte` programs with ExecuTorch's MetalBackend on any
host, and run them through ExecuTorch's runtime with libetmetal as its Metal backend.

Needs the `etmetal[executorch]` extra (executorch==1.5.1).
"""

from .backend import BackendRegistrationError, backend_library_path, register_backend
from .export import (ExecuTorchUnavailableError, MethodSpec, export_program, export_pte,
                     lower_methods)
from .pte import MetalDelegate, metal_delegates

__all__ = ["BackendRegistrationError", "ExecuTorchUnavailableError", "MetalDelegate",
           "MethodSpec", "backend_library_path", "export_program", "export_pte",
           "lower_methods", "metal_delegates", "register_backend"]
