"""Which symbols a shared library needs, and where the loaded process would find them.

A model .so compiled with `link_libtorch=False` leaves every `aoti_torch_*` symbol undefined.
Loading it with lazy binding would only fail when a missing function is first called (and
then abort the process), so the loader checks the list up front.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess

_ELF_MAGIC = b"\x7fELF"
_SHT_DYNAMIC = 6
_SHT_DYNSYM = 11
_DT_NEEDED = 1
_SHN_UNDEF = 0
_STB_WEAK = 2


class SymbolReadError(RuntimeError):
    """The library's symbol table could not be read."""


def _elf_layout(data: bytes) -> tuple[str, bool]:
    if data[:4] != _ELF_MAGIC:
        raise SymbolReadError("not an ELF file")
    elf_class, byte_order = data[4], data[5]
    if elf_class not in (1, 2) or byte_order not in (1, 2):
        raise SymbolReadError("unknown ELF class or byte order")
    return ("<" if byte_order == 1 else ">"), elf_class == 2


def _elf_sections(data: bytes, endian: str, is64: bool) -> list[tuple[int, int, int, int, int]]:
    """(type, offset, size, link, entry size) of every section."""
    if is64:
        shoff, = struct.unpack_from(endian + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(endian + "HH", data, 0x3A)
    else:
        shoff, = struct.unpack_from(endian + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(endian + "HH", data, 0x2E)
    sections = []
    for index in range(shnum):
        base = shoff + index * shentsize
        if is64:
            _, sh_type, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
                endian + "IIQQQQIIQQ", data, base)
        else:
            _, sh_type, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
                endian + "IIIIIIIIII", data, base)
        sections.append((sh_type, offset, size, link, entsize))
    return sections


def _string_at(strings: bytes, offset: int) -> str:
    end = strings.find(b"\0", offset)
    return strings[offset:end if end >= 0 else None].decode("utf-8", "replace")


def needed_libraries(path: str) -> list[str] | None:
    """The DT_NEEDED entries (sonames) of an ELF shared object; None when it is not ELF."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != _ELF_MAGIC:
        return None
    endian, is64 = _elf_layout(data)
    try:
        sections = _elf_sections(data, endian, is64)
        needed = []
        for sh_type, offset, size, link, entsize in sections:
            if sh_type != _SHT_DYNAMIC:
                continue
            _, str_offset, str_size, _, _ = sections[link]
            strings = data[str_offset:str_offset + str_size]
            entsize = entsize or (16 if is64 else 8)
            for entry in range(offset, offset + size, entsize):
                tag, value = struct.unpack_from(endian + ("qQ" if is64 else "iI"), data, entry)
                if tag == _DT_NEEDED:
                    needed.append(_string_at(strings, value))
        return needed
    except (struct.error, IndexError) as exc:
        raise SymbolReadError(f"truncated ELF file ({exc})") from None


def _elf_symbols(data: bytes, section_type: int):
    """Yields (name, binding, section index, value) of one ELF symbol table type."""
    endian, is64 = _elf_layout(data)
    try:
        sections = _elf_sections(data, endian, is64)
        symbols = []
        for sh_type, offset, size, link, entsize in sections:
            if sh_type != section_type:
                continue
            _, str_offset, str_size, _, _ = sections[link]
            strings = data[str_offset:str_offset + str_size]
            entsize = entsize or (24 if is64 else 16)
            for sym in range(offset + entsize, offset + size, entsize):  # entry 0 is null
                if is64:
                    name_off, info, _, shndx, value, _ = struct.unpack_from(
                        endian + "IBBHQQ", data, sym)
                else:
                    name_off, value, _, info, _, shndx = struct.unpack_from(
                        endian + "IIIBBH", data, sym)
                if name_off == 0:
                    continue
                symbols.append((_string_at(strings, name_off), info >> 4, shndx, value))
        return symbols
    except (struct.error, IndexError) as exc:
        raise SymbolReadError(f"truncated ELF file ({exc})") from None


def _elf_undefined_symbols(data: bytes) -> tuple[set[str], set[str]]:
    """(strong, weak) undefined dynamic symbols of an ELF shared object."""
    strong: set[str] = set()
    weak: set[str] = set()
    for name, binding, shndx, _ in _elf_symbols(data, _SHT_DYNSYM):
        if shndx == _SHN_UNDEF:
            (weak if binding == _STB_WEAK else strong).add(name)
    return strong, weak


def _nm_undefined_symbols(path: str) -> tuple[set[str], set[str]]:
    nm = shutil.which("nm")
    if nm is None:
        raise SymbolReadError("not an ELF file and no `nm` tool to read it")
    result = subprocess.run([nm, "-u", path], capture_output=True, text=True)
    if result.returncode != 0:
        raise SymbolReadError(f"nm failed: {result.stderr.strip()}")
    names = set()
    for line in result.stdout.splitlines():
        parts = line.split()
        if not parts:
            continue
        name = parts[-1]
        # Mach-O prefixes C symbols with an underscore.
        names.add(name[1:] if name.startswith("_") else name)
    return names, set()


def undefined_symbols(path: str) -> tuple[set[str], set[str]]:
    """(strong, weak) undefined dynamic symbols of the shared library at `path`."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] == _ELF_MAGIC:
        return _elf_undefined_symbols(data)
    return _nm_undefined_symbols(path)


# The aoti_torch_mps_* functions every generated kernel uses; any other aoti_torch_mps_*
# function a model imports is a fallback op (mm, convolution, attention, ...).
KERNEL_SHIM_FUNCTIONS = frozenset({
    "aoti_torch_mps_create_shader_library", "aoti_torch_mps_delete_shader_library",
    "aoti_torch_mps_get_kernel_function", "aoti_torch_mps_start_encoding",
    "aoti_torch_mps_set_arg_tensor", "aoti_torch_mps_set_arg_int",
    "aoti_torch_mps_dispatch_single", "aoti_torch_mps_dispatch_single_with_group_size",
    "aoti_torch_mps_dispatch_array", "aoti_torch_mps_dispatch_array_with_group_size",
    "aoti_torch_mps_malloc", "aoti_torch_mps_free", "aoti_torch_mps_memcpy",
    "aoti_torch_mps_copy_buffer", "aoti_torch_mps_run_command_block",
    "aoti_torch_mps_shared_callback",
})
# shim.h functions that compute (rather than create, view or free tensors).
SHIM_FALLBACK_FUNCTIONS = frozenset({
    "aoti_torch_index_put_out", "aoti_torch_scatter_out", "aoti_torch_scatter_reduce_out",
    "aoti_torch_zero_", "aoti_torch_proxy_executor_call_function", "aoti_torch__mm_plus_mm_out",
})


def fallback_functions(path: str) -> list[str]:
    """The fallback-op functions the model library at `path` imports, sorted."""
    strong, weak = undefined_symbols(path)
    return sorted(name for name in strong | weak
                  if (name.startswith("aoti_torch_mps_") and name not in KERNEL_SHIM_FUNCTIONS)
                  or name in SHIM_FALLBACK_FUNCTIONS)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _dladdr_function() -> ctypes._CFuncPtr | None:
    try:
        dladdr = ctypes.CDLL(None).dladdr
    except AttributeError:
        return None
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    dladdr.restype = ctypes.c_int
    return dladdr


def _dladdr(address: int) -> _DlInfo | None:
    dladdr = _dladdr_function()
    if dladdr is None or not address:
        return None
    info = _DlInfo()
    if dladdr(ctypes.c_void_p(address), ctypes.byref(info)) == 0 or not info.dli_fname:
        return None
    return info


def library_of_address(address: int) -> str | None:
    """Real path of the loaded library that contains `address`, when the loader knows it."""
    info = _dladdr(address)
    return os.path.realpath(os.fsdecode(info.dli_fname)) if info is not None else None


def global_symbol_address(name: str) -> int:
    """Address of `name` in the process's global symbol scope; 0 when it is not there."""
    try:
        symbol = getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return 0
    return ctypes.cast(symbol, ctypes.c_void_p).value or 0
