"""The interface of explicit transforms: ``thunder.jit(fn, transforms=[...])``.

A transform is an object holding its configuration (validated when it is constructed). thunder
calls its hooks at fixed points of compilation (``thunder.driver.pipeline.compile_entry`` orders them);
each hook that returns a trace returns a *new* trace (traces are not mutated), and the returned trace is
appended to the corresponding list of traces (``last_traces``, ``last_backward_traces``). Every hook is
optional. ``compilation`` (a ``thunder.driver.pipeline.Compilation``) tells the hooks about the
compilation at hand: the jitted module, where each input comes from (which parameter of which
submodule), which backward output is whose gradient, and lets them specialize the entry on Python state.

- ``transform_module(compile_data)``: once, when the transform is applied (by ``thunder.jit`` or, to an
  already jitted one, by ``thunder.add_transform``), before anything is traced.
  ``compile_data.thunder_module`` is the ``ThunderModule`` (None for a function). A transform that changes
  how the module's tensors are held (sharding, say) records that in state it owns or in ``compile_data``,
  never as attributes on the user's module.
- ``transform_module_tensors(tensors, compilation)``: while tracing, before the program runs, with the module's
  parameters and buffers as they became proxies: a list of ``(proxy, source)`` (one per distinct tensor, in
  module order; ``proxy`` is what earlier transforms made of it). Returns the list of what the program sees in
  their places (by default the proxies themselves); operations it records run before the program's.
- ``update_module_tensors(tensors, compilation)``: while tracing, before the program runs, after
  ``transform_module_tensors``, with the same ``(proxy, source)`` list: returns ``(proxy, new value)`` pairs,
  updates in place of module tensors that the program then sees and that are written back into the module after
  the call, as the program's own in-place updates are (buffers broadcast from another rank, say).
- ``transform_computation(trace, compilation)``: the traced program (torch-level), after dead-code
  elimination, before autodiff and execution. Called for inference and training alike.
- ``transform_forward_backward(forward, backward, compilation)``: the forward and backward traces of a
  training specialization, after autodiff, before the values saved for the backward are chosen (the
  backward may read any forward value) and before executors claim them. Returns both.
  ``compilation.grad_inputs[i]`` is the forward input whose gradient the backward's output ``i`` is.
- ``transform_executed(trace, compilation, kind)``: each trace the executors produced (``kind``:
  ``"computation"``, ``"forward"`` or ``"backward"``), before values are freed after their last use.
- ``transform_state_dict(state_dict, thunder_module)``: what ``ThunderModule.state_dict()`` returns, from the
  original module's (a sharding transform may gather shards, say); ``transform_loaded_state_dict(state_dict,
  thunder_module)``: what ``ThunderModule.load_state_dict`` loads into the original module (shard a full one).
  Transforms apply in order on saving, in reverse order on loading.

A transform that changes what the module holds (a parameter's local shard in its place, say) calls
``ThunderModule.replace_module_tensor(name, tensor)`` from ``transform_module``: the module then holds the
new tensor under that name (every alias of it too), and what was compiled for the old one is dropped.
"""
from __future__ import annotations

import weakref


class Transform:
    def transform_module(self, compile_data) -> None:
        return None

    def transform_module_tensors(self, tensors, compilation):
        return [proxy for proxy, _ in tensors]

    def update_module_tensors(self, tensors, compilation) -> list:
        return []

    def transform_computation(self, trace, compilation):
        return trace

    def transform_forward_backward(self, forward, backward, compilation):
        return forward, backward

    def transform_executed(self, trace, compilation, kind: str):
        return trace

    def transform_state_dict(self, state_dict, thunder_module):
        return state_dict

    def transform_loaded_state_dict(self, state_dict, thunder_module):
        return state_dict

    def __repr__(self):
        return f"{type(self).__name__}()"


# Transforms a module asks ``thunder.jit`` for (``thunder.distributed.ddp(module)``), applied before the ones
# passed to ``thunder.jit``. A table beside the modules rather than attributes on them.
_REQUESTED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def request_transform(module, transform: Transform) -> None:
    """``thunder.jit(module)`` will apply ``transform`` (after those requested earlier)."""
    _REQUESTED[module] = (*_REQUESTED.get(module, ()), transform)


def requested_transforms(module) -> tuple:
    return _REQUESTED.get(module, ()) if module is not None else ()
