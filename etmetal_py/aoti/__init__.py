"""AOTInductor for Metal: export and compile models for device "mps", load and run packages."""

from .compile import CompileError, aoti_compile_and_package
from .export import ExportError, export

__all__ = ["CompileError", "ExportError", "aoti_compile_and_package", "export"]
