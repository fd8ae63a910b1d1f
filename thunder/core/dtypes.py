"""Thunder uses torch's own dtype objects; this module names them for printed traces.

A trace prints a dtype argument as ``dtypes.float32``, which this module resolves back to
``torch.float32``, so printed traces stay runnable Python.
"""
import torch

bool8 = torch.bool
uint8 = torch.uint8
int8 = torch.int8
int16 = torch.int16
int32 = torch.int32
int64 = torch.int64
float16 = torch.float16
bfloat16 = torch.bfloat16
float32 = torch.float32
float64 = torch.float64
complex64 = torch.complex64
complex128 = torch.complex128
# Every other dtype of torch (complex32, the float8 and unsigned variants, ...) under its torch name,
# so any traced dtype prints as a resolvable ``dtypes.<name>``.
for _name in dir(torch):
    if isinstance(getattr(torch, _name), torch.dtype) and _name not in globals():
        globals()[_name] = getattr(torch, _name)

# Short names used in type comments: ``# t0: "cpu f32[2, 2]"``.
_SHORT_NAMES = {
    torch.bool: "b8",
    torch.uint8: "ui8",
    torch.int8: "i8",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float32: "f32",
    torch.float64: "f64",
    torch.complex32: "c32",
    torch.complex64: "c64",
    torch.complex128: "c128",
    torch.float8_e4m3fn: "f8_e4m3fn",
    torch.float8_e5m2: "f8_e5m2",
}

_PRINT_NAMES = {torch.bool: "bool8"}


def short_name(dtype: torch.dtype) -> str:
    return _SHORT_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def print_name(dtype: torch.dtype) -> str:
    """The expression that denotes ``dtype`` in a printed trace."""
    return "dtypes." + _PRINT_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def is_complex(dtype: torch.dtype) -> bool:
    return dtype.is_complex


def is_integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype is not torch.bool


def is_inexact(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def is_low_precision(dtype: torch.dtype) -> bool:
    return dtype in (torch.float16, torch.bfloat16)


def to_real(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}.get(dtype, dtype)


def python_type_of(dtype: torch.dtype) -> type:
    if dtype is torch.bool:
        return bool
    if dtype.is_complex:
        return complex
    if dtype.is_floating_point:
        return float
    return int
