"""The interface of explicit transforms: ``thunder.jit(fn, transforms=[...])``.

A transform is an object holding its configuration (validated when it is constructed). thunder
calls its hooks at fixed points of compilation; each hook that returns a trace returns a *new*
trace (traces are not mutated) and the returned trace is appended to the corresponding list of
traces (``last_traces``, ``last_backward_traces``). Every hook is optional.

- ``transform_module(compile_data)``: once, in ``thunder.jit``, before anything is traced. A
  transform that changes how the module's tensors are held (sharding, say) records that in
  state it owns or in ``compile_data`` — never as attributes on the user's module.
- ``transform_computation(trace, compile_data)``: the traced program (torch-level), before autodiff
  and execution. Called for inference and training alike.
- ``transform_forward_backward(forward, backward, compile_data)``: the forward and backward traces
  of a training specialization, after autodiff and before executors claim them. Returns both.
"""
from __future__ import annotations


class Transform:
    def transform_module(self, compile_data) -> None:
        return None

    def transform_computation(self, trace, compile_data):
        return trace

    def transform_forward_backward(self, forward, backward, compile_data):
        return forward, backward

    def __repr__(self):
        return f"{type(self).__name__}()"
