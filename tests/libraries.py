"""Importing the model libraries the tests run (torchvision, timm) on a CPU-only torch.

PyPI has only CUDA builds of torchvision for Linux. Its Python code (the models) runs on any torch of its release,
but its C++ extension (``nms``, ``roi_align``, ``deform_conv2d``, ...) does not load against a CPU torch, and the
import then fails registering fake kernels for ``torchvision::nms`` and ``torchvision::qnms``, operators the
extension would have defined. Declaring those two (schemas only, no kernels) lets the import finish; the
classification models the tests run never call them (a call would raise for want of a kernel). timm imports
torchvision, so it is imported through here too.
"""
from __future__ import annotations

import importlib
import sys

import pytest
import torch

_DECLARED: list = []  # the library holding the two schemas, kept alive


def _declare_torchvision_operators():
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _DECLARED.append(lib)


def import_torchvision():
    """torchvision, its operators declared first where its extension does not load; raises where it cannot import."""
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as e:
        if "torchvision::nms" not in str(e) or _DECLARED:
            raise
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]  # the half-imported package
    _declare_torchvision_operators()
    return importlib.import_module("torchvision")


def import_library(name: str):
    """``torchvision`` or ``timm`` (or any other module), skipping the test with the reason where it cannot import."""
    try:
        if name in ("torchvision", "timm"):
            import_torchvision()
        return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - not installed, or built for another torch
        pytest.skip(f"{name} does not import here ({type(e).__name__}: {e})")
