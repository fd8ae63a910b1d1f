"""``ThunderModule``: the ``nn.Module`` that ``thunder.jit(module)`` returns."""
from __future__ import annotations

import contextlib

import torch


class ThunderModule(torch.nn.Module):
    """A wrapper nn.Module subclass.

    This wrapper is returned by thunder.jit, you would typically not instantiate it manually.
    It shares the original module's parameters and buffers (in both directions): the queries below
    answer for the original module, with the same names.
    """

    def __init__(self, model: torch.nn.Module, compiled_model_call):
        super().__init__()
        self._model = model
        self._forward_fn = compiled_model_call

    def forward(self, *args, **kwargs):
        return self._forward_fn(*args, **kwargs)

    def __call__(self, *args, **kwargs):  # hooks on the ThunderModule are not supported (see the sharp edges)
        return self._forward_fn(*args, **kwargs)

    def get_buffer(self, name):
        return self._model.get_buffer(name)

    def get_parameter(self, name):
        return self._model.get_parameter(name)

    def get_submodule(self, name):
        return self._model.get_submodule(name)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._model.named_parameters(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate)

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._model.named_buffers(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate)

    def parameters(self, recurse=True):
        return self._model.parameters(recurse=recurse)

    def buffers(self, recurse=True):
        return self._model.buffers(recurse=recurse)

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        return self._model.state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        return self._model.load_state_dict(state_dict, strict=strict, assign=assign)

    @contextlib.contextmanager
    def no_sync(self):
        """Context manager to disable gradient synchronization in data parallel mode.

        Without a data-parallel transform this has no effect.
        """
        yield
