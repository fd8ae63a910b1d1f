"""``ThunderModule``: the ``nn.Module`` that ``thunder.jit(module)`` returns."""
from __future__ import annotations

import contextlib
import copy
import pickle

import torch

_OWN = frozenset({"_model", "_forward_fn", "_lc_cd", "_lc_cs"})


class ThunderModule(torch.nn.Module):
    """A wrapper nn.Module subclass.

    This wrapper is returned by thunder.jit, you would typically not instantiate it manually.
    It shares the original module's parameters and buffers (in both directions): the queries below
    answer for the original module, with the same names. Other attributes (``jm.in_features``,
    ``jm.training``, methods of the original module) are read from and written to the original
    module, and hooks registered on it are registered on the original module (where the traced
    program runs them; adding or removing one recompiles).
    """

    def __init__(self, model: torch.nn.Module, compiled_model_call):
        super().__init__()
        self._model = model
        self._forward_fn = compiled_model_call
        del self.__dict__["training"]  # the original module's flag (see __getattr__)

    def forward(self, *args, **kwargs):
        return self._forward_fn(*args, **kwargs)

    def __call__(self, *args, **kwargs):  # hooks registered here go to the original module, which runs them
        return self._forward_fn(*args, **kwargs)

    # -- attributes reach the original module ------------------------------------------------------
    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self.__dict__.get("_modules", {}).get("_model")
            if model is None or name in _OWN:
                raise
        return getattr(model, name)

    def __setattr__(self, name: str, value):
        if name in _OWN or name in self.__dict__ or "_model" not in self.__dict__.get("_modules", {}):
            super().__setattr__(name, value)
        else:
            setattr(self._model, name, value)

    def __delattr__(self, name: str):
        if name in _OWN or name in self.__dict__:
            super().__delattr__(name)
        else:
            delattr(self._model, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self._model)))

    # -- hooks -------------------------------------------------------------------------------------
    def register_forward_hook(self, *args, **kwargs):
        return self._model.register_forward_hook(*args, **kwargs)

    def register_forward_pre_hook(self, *args, **kwargs):
        return self._model.register_forward_pre_hook(*args, **kwargs)

    def register_full_backward_hook(self, *args, **kwargs):
        return self._model.register_full_backward_hook(*args, **kwargs)

    def register_full_backward_pre_hook(self, *args, **kwargs):
        return self._model.register_full_backward_pre_hook(*args, **kwargs)

    def register_backward_hook(self, *args, **kwargs):
        return self._model.register_backward_hook(*args, **kwargs)

    # -- copying and pickling ------------------------------------------------------------------------
    def __deepcopy__(self, memo):
        """An independent jitted copy: a deep copy of the original module, jitted with the same options."""
        cd = self._lc_cd
        model = copy.deepcopy(self._model, memo)
        return _rejit(model, _jit_options(cd, executors=cd.executors, transforms=copy.deepcopy(cd.transforms, memo)))

    def __reduce_ex__(self, protocol):
        """Pickles the original module and the jit options; loading jits the module again."""
        cd = self._lc_cd
        from thunder.extend import _EXECUTORS

        unregistered = [e for e in cd.executors if _EXECUTORS.get(e.name) is not e]
        if unregistered:
            raise TypeError(f"cannot pickle this ThunderModule: its executors {unregistered} are not registered by name "
                            "(thunder.extend.register_executor), so they cannot be found again when loading. Pickle the "
                            "original module (or its state_dict) instead, and jit it again after loading.")
        options = _jit_options(cd, executors=tuple(e.name for e in cd.executors), transforms=cd.transforms)
        try:
            pickle.dumps(options, protocol)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise TypeError(f"cannot pickle this ThunderModule: its jit options (transforms or compile options) cannot "
                            f"be pickled ({e}). Pickle the original module (or its state_dict) instead, and jit it "
                            "again after loading.") from None
        return _rejit, (self._model, options)

    # -- the original module's parameters and state --------------------------------------------------
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
        """The original module's state dict, as the transforms present it (``Transform.transform_state_dict``)."""
        transforms = self._lc_cd.transforms
        if not transforms:
            return self._model.state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)
        sd = self._model.state_dict(*args, prefix=prefix, keep_vars=keep_vars)
        for t in transforms:
            sd = t.transform_state_dict(sd, self)
        if destination is None:
            return sd
        destination.update(sd)
        return destination

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Loads into the original module what the transforms make of ``state_dict``
        (``Transform.transform_loaded_state_dict``, last transform first)."""
        for t in reversed(self._lc_cd.transforms):
            state_dict = t.transform_loaded_state_dict(state_dict, self)
        return self._model.load_state_dict(state_dict, strict=strict, assign=assign)

    def replace_module_tensor(self, name: str, tensor: torch.Tensor) -> None:
        """Makes the original module hold ``tensor`` as its parameter or buffer ``name`` (``"layers.0.weight"``),
        under every name that held the old tensor (tied weights stay tied). For transforms (a sharded
        parameter in place of the full one); programs compiled so far are dropped."""
        owner, _, leaf = name.rpartition(".")
        old_holder = self._model.get_submodule(owner)
        collection = "_parameters" if leaf in old_holder._parameters else "_buffers"
        old = old_holder.__dict__[collection].get(leaf)
        if old is None:
            raise KeyError(f"{type(self._model).__name__} has no parameter or buffer named {name!r}")
        if collection == "_parameters" and not isinstance(tensor, torch.nn.Parameter):
            raise TypeError(f"replace_module_tensor: {name!r} is a parameter; give a torch.nn.Parameter")
        for m in self._model.modules():
            d = m.__dict__[collection]
            for k, v in d.items():
                if v is old:
                    d[k] = tensor
        self._lc_cs.cache.clear()

    @contextlib.contextmanager
    def no_sync(self):
        """Context manager to disable gradient synchronization in data parallel mode.

        Backwards of forwards run inside the context accumulate gradients locally; the first backward
        outside it synchronizes the accumulated gradients (as torch's DDP ``no_sync``). Without a
        data-parallel transform this has no effect.
        """
        cd = self._lc_cd
        before = cd.no_sync
        cd.no_sync = True
        try:
            yield
        finally:
            cd.no_sync = before


def _jit_options(cd, *, executors, transforms) -> dict:
    return dict(langctx=cd.langctx, executors=executors, sharp_edges=cd.sharp_edges, cache=cd.cache_option.value,
                disable_torch_autograd=cd.disable_torch_autograd, transforms=transforms, cache_limit=cd.cache_limit,
                **cd.compile_options)


def _rejit(model: torch.nn.Module, options: dict) -> ThunderModule:
    import thunder

    return thunder.jit(model, **options)
