"""AOTInductor for Metal: export and compile models for device "mps", load and run packages."""

from .compile import CompileError, aoti_compile_and_package
from .export import ExportError, export
from .runner import ModelRunner, PackageError, RunError, aoti_load_package

__all__ = ["CompileError", "ExportError", "ModelRunner", "PackageError", "RunError",
           "aoti_compile_and_package", "aoti_load_package", "export"]
