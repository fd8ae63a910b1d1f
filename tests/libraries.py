"""Importing the model libraries the tests run (torchvision, timm) on a CPU-only torch.

scripts/test.sh installs them in ``.test-libs/`` at the repository's root, which is put on the path here, when a
test asks for them, and not before: PyPI has only CUDA builds of torchvision for Linux, and installed in the
environment such a build breaks the import of transformers, lightning and torchmetrics, which import torchvision
when they find it. Once imported through here it works, and they use it. (Where torchvision and timm are installed
in the environment, as on a machine with CUDA, they are imported from there.)

torchvision's Python code (the models) runs on any torch of its release,
but its C++ extension (``nms``, ``roi_align``, ``deform_conv2d``, ...) does not load against a CPU torch, and the
import then fails registering fake kernels for ``torchvision::nms`` and ``torchvision::qnms``, operators the
extension would have defined. Declaring those two (schemas only, no kernels) lets the import finish; the
classification models the tests run never call them (a call would raise for want of a kernel). timm imports
torchvision, so it is imported through here too.
"""
from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

_DECLARED: list = []  # the library holding the two schemas, kept alive
_TEST_LIBS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".test-libs")


def _declare_torchvision_operators():
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _DECLARED.append(lib)


def import_torchvision():
    """torchvision, its operators declared first where its extension does not load; raises where it cannot import
    (leaving no half-imported package and no added path behind for other libraries to trip on)."""
    added = os.path.isdir(_TEST_LIBS) and _TEST_LIBS not in sys.path
    if added:
        sys.path.append(_TEST_LIBS)  # after the environment's own packages
    try:
        try:
            return importlib.import_module("torchvision")
        except RuntimeError as e:
            if "torchvision::nms" not in str(e) or _DECLARED:
                raise
        _forget_torchvision()
        _declare_torchvision_operators()
        return importlib.import_module("torchvision")
    except Exception:
        _forget_torchvision()
        if added:
            sys.path.remove(_TEST_LIBS)
        raise


def _forget_torchvision():
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]


def import_library(name: str):
    """``torchvision`` or ``timm`` (or any other module), skipping the test with the reason where it cannot import."""
    try:
        if name in ("torchvision", "timm"):
            import_torchvision()
        return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - not installed, or built for another torch
        pytest.skip(f"{name} does not import here ({type(e).__name__}: {e})")
