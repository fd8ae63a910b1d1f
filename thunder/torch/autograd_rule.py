"""Differentiation by torch's autograd: for the generic fallback (ops thunder has no definition for),
for attention (whose kernel choice, flash, memory-efficient or math, only torch itself knows), and for
ops whose eager gradient is torch's own composite or fused kernel (norms, variance, some losses).

``torch_autograd_forward`` runs the op under autograd in the forward trace and keeps the graph;
``torch_autograd_backward`` runs ``torch.autograd.grad`` on it in the backward trace, or calls its one node directly
where the graph is that one node (``_one_node_grads``).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from thunder.core.codeutils import flat_proxies
from thunder.core.proxies import TensorProxy, Var, set_layout_hint
from thunder.core.pytree import maybe_node, tree_flatten, tree_leaves, tree_unflatten
from thunder.core.symbol import Symbol
from thunder.core.trace import get_tracectx
from thunder.torch import fallback
from thunder.transforms.grad_rules import ArgGrads, EdgeParts


class AutogradGraph:
    """Inputs and outputs of a function run under torch autograd, kept for its backward."""

    __slots__ = ("inputs", "outputs")

    def __init__(self, inputs, outputs):
        self.inputs = inputs
        self.outputs = outputs


# [Note: differentiating with torch's autograd]
# The tensors that require grad are found anywhere in the call's arguments: positional or keyword,
# nested in lists, tuples and dicts (``torch.linalg.multi_dot([a, b, c])``, ``nn.LSTM``'s list of
# weights, ``embedding_bag(per_sample_weights=w)``). They are numbered by their position among the
# leaves of ``tree_flatten((args, kwargs))`` (thunder/core/pytree.py), which is the same when tracing
# (proxies) and when running (tensors). The outputs are the tensors among the flattened result, in
# the order of ``flat_proxies``; the backward receives one cotangent (or None) for each of them.
def torch_autograd_forward(fn, args, kwargs, groups, out_like=None):
    """Runs ``fn`` with autograd enabled; returns its outputs and the graph for ``torch_autograd_backward``.

    ``groups``: the positions of each traced tensor that requires grad. A tensor passed several times is one leaf
    (``attn(x, x, x)`` sees ``query is key``); the groups are those of the trace, so the backward returns one
    gradient per group even where two traced tensors are one tensor at run time (``x`` and ``x.contiguous()``).
    """
    flat_args = not any(maybe_node(a) for a in args) and not any(maybe_node(a) for a in kwargs.values())
    if flat_args:  # the leaves are the arguments themselves (the common case: no pytree walk, a few microseconds)
        leaves = [*args, *kwargs.values()]
    else:
        leaves, spec = tree_flatten((args, kwargs))
    inputs = []
    with torch.enable_grad():
        for group in groups:
            d = leaves[group[0]].detach().requires_grad_(True)
            inputs.append(d)
            for i in group:
                leaves[i] = d
        if flat_args:
            args, kwargs = leaves[:len(args)], dict(zip(kwargs, leaves[len(args):]))
        else:
            args, kwargs = tree_unflatten(leaves, spec)
        out = fn(*args, **kwargs)
    if type(out) is torch.Tensor:
        return out.detach(), AutogradGraph(inputs, [out])
    flat, out_spec = tree_flatten(out)
    graph = AutogradGraph(inputs, [o for o in flat if isinstance(o, torch.Tensor)])
    return tree_unflatten([o.detach() if isinstance(o, torch.Tensor) else o for o in flat], out_spec), graph


def torch_autograd_backward(graph, *cotangents, sums=None, split=()):
    """The gradients of the graph's inputs; ``sums``: per input, its gradient's sum so far or None. A sum is given to
    torch's engine with the outputs' cotangents (the input as one more output), so the graph's parts are added to it
    one by one, as eager's engine adds them ([Note: the order of a gradient's sum]); where the graph is one node with
    one part for each input, the part is added here (``_added_to_sums``). ``split``: (input, n) of inputs whose
    gradient comes as the n parts the graph's edges bring it (``_edge_parts``), in place of their sum."""
    if graph.inputs is None:
        raise RuntimeError(
            "Trying to backward through the graph a second time (or directly access saved tensors after they have "
            "already been freed). Specify retain_graph=True if you need to backward through the graph a second time.")
    outs, grads = [], []
    for o, g in zip(graph.outputs, cotangents):
        if g is not None and o.requires_grad:
            outs.append(o)
            grads.append(g)
    n_out = len(outs)  # the graph's outputs given cotangents; the inputs given sums follow them
    if outs and sums:
        for i, s in zip(graph.inputs, sums):
            if s is not None:
                outs.append(i)
                grads.append(s)
    keep = torch._C._autograd._get_current_graph_task_keep_graph()
    if split:
        parts = _edge_parts(graph, outs, grads, dict(split), keep) if outs else None
        if parts is not None:
            if not keep:
                graph.inputs = graph.outputs = None
            return parts
    result = _one_node_grads(graph, outs, grads) if len(outs) == 1 else None
    if result is None and n_out and len(outs) > n_out and _one_edge_each(outs[:n_out], graph.inputs):
        # the graph's one part of each input's gradient, added to its sum here (see _added_to_sums)
        parts = torch.autograd.grad(outs[:n_out], graph.inputs, grads[:n_out], retain_graph=keep, allow_unused=True)
        result = _added_to_sums(parts, sums, graph.inputs)
    if result is None and outs:
        result = torch.autograd.grad(outs, graph.inputs, grads, retain_graph=keep, allow_unused=True,
                                     materialize_grads=True)
    elif result is None:
        result = [torch.zeros_like(i) if s is None else s for i, s in zip(graph.inputs, sums or [None] * len(graph.inputs))]
    if not keep:
        graph.inputs = graph.outputs = None  # release the graph's saved tensors
    # a 0-dim ZeroTensor (sgn's gradient) computes other dtypes than the trace says (times or divided by a Python
    # float it is float64): eager's engine casts each gradient to its input's dtype, a backward trace's operations do
    # not. Others stay ZeroTensors: the operations after them give zeros (0.0) as eager's do, where a product of
    # materialized zeros and negative values would be -0.0
    result = tuple(torch.zeros_like(r) if isinstance(r, torch.Tensor) and r.ndim == 0 and r._is_zerotensor() else r
                   for r in result)
    if split:  # the sum as the first part, the others -0: adding -0 changes nothing, not even a zero's sign
        n_parts = dict(split)
        result = tuple(p for i, r in enumerate(result)
                       for p in (r, *(torch.full_like(r, -0.0) for _ in range(n_parts.get(i, 1) - 1))))
    return result


def _edge_inputs(node, inputs) -> list | None:
    """For each of ``node``'s edges, the position among ``inputs`` of the leaf it leads to (None for an empty edge);
    None where an edge leads into more graph."""
    where = []
    for next_node, _ in node.next_functions:
        i = _leaf_position(next_node, inputs)
        if next_node is not None and i is None:
            return None
        where.append(i)
    return where


def _leaf_position(next_node, inputs) -> int | None:
    """The position among ``inputs`` of the leaf an edge's node accumulates into (an AccumulateGrad's), or None."""
    variable = getattr(next_node, "variable", None) if next_node is not None else None
    return next((j for j, t in enumerate(inputs) if t is variable), None) if variable is not None else None


def _edge_parts(graph, outs, grads, n_parts: dict, keep: bool):
    """``torch_autograd_backward``'s result with the inputs of ``n_parts`` (position -> parts) given their parts one
    by one: each gradient an edge of the graph brings them, in the order eager's engine adds them to a gradient sum (a
    returned input's, [Note: the gradient of a returned input]: ``xlogy(x, x)`` of an ``x`` the program returns gives
    ``(ct + self's) + other's``, not ``ct + (self's + other's)``; ``pairwise_distance(x, x)``'s parts come from a
    subtraction inside it). The engine runs the graph; hooks on the nodes with edges into those inputs keep their
    gradients per edge, in the order the nodes run. None where the parts are not as many as expected
    (``_edge_counts``), or one would be cast or reduced on its way to the input."""
    edges = _nodes_into(outs, graph.inputs, n_parts)
    captured = []
    handles = [node.register_hook(functools.partial(lambda w, edge_grads, _: captured.append((w, edge_grads)), where))
               for node, where in edges]
    try:
        result = torch.autograd.grad(outs, graph.inputs, grads, retain_graph=keep, allow_unused=True,
                                     materialize_grads=True)
    finally:
        for h in handles:
            h.remove()
    parts = {i: [] for i in n_parts}
    for where, edge_grads in captured:
        for i, eg in zip(where, edge_grads):
            if i in parts:
                t = graph.inputs[i]
                if eg is None or eg.shape != t.shape or eg.dtype != t.dtype or eg.layout != t.layout:
                    return None
                parts[i].append(eg)
    if any(len(parts[i]) != n for i, n in n_parts.items()):
        return None
    return tuple(p for k, r in enumerate(result) for p in parts.get(k, (r,)))


def _nodes_into(outs, inputs, wanted) -> list:
    """The nodes of the graph from ``outs`` with an edge into an input at a position in ``wanted``, each with the
    input position of each of its edges (None: an edge elsewhere)."""
    found, seen = [], set()
    stack = [o.grad_fn for o in outs if o.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        where = []
        for next_node, _ in node.next_functions:
            i = _leaf_position(next_node, inputs)
            where.append(i if i in wanted else None)
            if next_node is not None and getattr(next_node, "variable", None) is None:
                stack.append(next_node)
        if any(i is not None for i in where):
            found.append((node, where))
    return found


def _edge_counts(fn, leaves, spec, groups) -> list | None:
    """Per group of argument positions (one tensor passed at each), how many edges of eager's autograd graph of ``fn``
    lead into it: the parts of its gradient (``pairwise_distance(x, x)``: 2, ``cosine_similarity(x, x)``: 4), from
    a run on meta tensors; None where that run fails."""
    try:
        metas = [fallback.meta_tensor(x) for x in leaves]
        for group in groups:
            t = metas[group[0]].requires_grad_()
            for i in group:
                metas[i] = t
        args, kwargs = tree_unflatten(metas, spec)
        with torch._C.DisableTorchFunction(), torch.enable_grad():
            out = [o for o in tree_leaves(fn(*args, **kwargs)) if isinstance(o, torch.Tensor) and o.requires_grad]
    except Exception:  # noqa: BLE001 - no meta run (a value-dependent op): the parts are not known
        return None
    inputs = [metas[g[0]] for g in groups]
    counts = [0] * len(groups)
    for _, where in _nodes_into(out, inputs, range(len(groups))):
        for i in where:
            if i is not None:
                counts[i] += 1
    return counts


def _one_edge_each(outs, inputs) -> bool:
    """Whether the graph is one node (of all of ``outs``) with at most one edge into each input, and none elsewhere."""
    node = outs[0].grad_fn
    if node is None or any(o.grad_fn is not node for o in outs):
        return False
    where = _edge_inputs(node, inputs)
    reached = [i for i in where or () if i is not None]
    return where is not None and len(set(reached)) == len(reached)


def _added_to_sums(parts, sums, inputs):
    """Each input's gradient: its sum so far with the graph's one part added, as eager's engine adds a part to a sum it
    holds alone, in place: a ZeroTensor part (``sgn``'s gradient) adds zeros, which turn the sum's -0.0 into 0.0
    (generated programs 40586, 73332), where adding the ZeroTensor out of place, as the engine does to a sum it was
    given, leaves it."""
    return [torch.zeros_like(t) if p is None and s is None else p if s is None else s if p is None
            else s + 0.0 if p._is_zerotensor() else s + p for s, p, t in zip(sums, parts, inputs)]


def _one_node_grads(graph, outs, grads):
    """The inputs' gradients from calling the one autograd node between them and the one output directly, as the
    engine would call it, or None where the graph is not that simple (then the engine runs it).

    A single kernel under autograd (attention, most fallback ops) makes one node whose next edges lead straight to
    the inputs; ``torch.autograd.grad`` on it costs tens of microseconds of engine set-up around that one call (a
    reentrant backward inside thunder's). The node's result is the engine's when the engine would not change it:
    every gradient already of its input's shape, dtype and device (the engine casts or sums otherwise), grad mode off
    (no graph of the backward to record), and each input reached by one edge (the engine adds the gradients of
    several). Only torch's own (C++) nodes are called: a custom ``autograd.Function``'s node is not callable."""
    (out,), (g,) = outs, grads
    node = out.grad_fn
    if (node is None or not callable(node) or out.output_nr != 0 or len(node._input_metadata) != 1
            or torch.is_grad_enabled()
            or g.shape != out.shape or g.dtype != out.dtype or g.device != out.device):
        return None
    where = _edge_inputs(node, graph.inputs)
    reached = [i for i in where or () if i is not None]
    if where is None or len(set(reached)) != len(reached):
        return None
    edge_grads = node(g)
    if not isinstance(edge_grads, tuple):
        edge_grads = (edge_grads,)
    result = [None] * len(graph.inputs)
    for i, eg in zip(where, edge_grads):
        if i is None:
            continue
        if eg is None:  # a node skips the edges the running graph task does not need (``autograd.grad(out, inputs)``
            return None  # outside: none of these inputs is among its), or gives no gradient: the engine decides
        t = graph.inputs[i]
        if eg.shape != t.shape or eg.dtype != t.dtype or eg.device != t.device or eg.layout != t.layout:
            return None  # the engine would cast or reduce it: let it run (the node keeps its saved tensors)
        result[i] = eg
    return [torch.zeros_like(t) if r is None else r for t, r in zip(graph.inputs, result)]


def _forward_meta(fn, args, kwargs, groups, out_like=None):
    """``out_like``: the outputs' metadata, when known without running torch's meta kernel."""
    if out_like is None:
        out = fallback.meta_outputs(fn, args, kwargs)
    else:
        trace = get_tracectx()
        requires_grad = any(isinstance(a, TensorProxy) and a.requires_grad for a in tree_leaves((args, kwargs)))
        out = tuple(trace.tensor(s, d, dev, requires_grad) for s, d, dev in out_like)
        out = out[0] if len(out) == 1 else out
    return out, Var(get_tracectx().make_name("graph"))


def _backward_meta(graph, *cotangents, like, sums=None, split=()):
    """``like``: (shape, dtype, device) of each gradient — metadata, so the inputs are not kept alive for it;
    ``split``: (input, n) of inputs whose gradient comes as n parts."""
    trace = get_tracectx()
    for s, (shape, dtype, _) in zip(sums or (), like):  # each sum goes on as its input's gradient
        assert s is None or (tuple(s.shape), s.dtype) == (tuple(shape), dtype), f"a sum of {s.shape} for a {shape} input"
    n_parts = dict(split)
    return tuple(trace.tensor(shape, dtype, device) for i, (shape, dtype, device) in enumerate(like)
                 for _ in range(n_parts.get(i, 1)))


torch_autograd_forward_sym = Symbol("torch_autograd_forward", _forward_meta, module="ltorch", is_prim=True)
torch_autograd_backward_sym = Symbol("torch_autograd_backward", _backward_meta, module="ltorch", is_prim=True)
torch_autograd_forward_sym.torch_impl = torch_autograd_forward


def torch_autograd_backward_impl(graph, *cotangents, like, sums=None, split=()):
    return torch_autograd_backward(graph, *cotangents, sums=sums, split=split)


torch_autograd_backward_sym.torch_impl = torch_autograd_backward_impl
from thunder.torch.registry import SYMBOLS as _SYMBOLS  # noqa: E402

_SYMBOLS["torch_autograd_forward"] = torch_autograd_forward_sym
_SYMBOLS["torch_autograd_backward"] = torch_autograd_backward_sym


class _TensorMeta(NamedTuple):
    shape: tuple
    dtype: torch.dtype
    device: torch.device


def _predicted_layouts(fn, leaves, spec, groups):
    """The strides of ``fn``'s tensor outputs and of its inputs' gradients (one per group, None where unreached), from
    running it and its backward on fake tensors (contiguous inputs, output gradients laid out as the outputs); None
    where that fails (a device this machine lacks, an operation without a fake kernel). See [Note: layout hints]."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with FakeTensorMode():
            fakes = [torch.empty(a.shape, dtype=a.dtype, device=a.device) if isinstance(a, _TensorMeta) else a
                     for a in leaves]
            inputs = []
            with torch.enable_grad():
                for group in groups:
                    leaf = fakes[group[0]].requires_grad_(True)
                    inputs.append(leaf)
                    for i in group:
                        fakes[i] = leaf
                args, kwargs = tree_unflatten(fakes, spec)
                outs = [o for o in tree_leaves(fn(*args, **kwargs)) if isinstance(o, torch.Tensor)]
            grads = torch.autograd.grad([o for o in outs if o.requires_grad],
                                        inputs, [torch.empty_like(o) for o in outs if o.requires_grad],
                                        allow_unused=True) if inputs else ()
            return [o.stride() for o in outs], [None if g is None else g.stride() for g in grads]
    except Exception:  # noqa: BLE001 - a hint only: without it, regions compile for contiguous inputs
        return None


def _layout_predictor(fn, leaves, spec, groups):
    """``predict(0, i)``: the strides of output ``i``, ``predict(1, i)``: of gradient ``i`` (``_predicted_layouts``,
    run once, at the first question; None where unknown). Holds the inputs' metadata, not the proxies."""
    meta = [_TensorMeta(tuple(a.shape), a.dtype, a.device) if isinstance(a, TensorProxy) else a for a in leaves]
    layouts = []

    def predict(which: int, i: int):
        if not layouts:
            layouts.append(_predicted_layouts(fn, meta, spec, groups))
        found = layouts[0]
        return found[which][i] if found is not None and i < len(found[which]) else None

    return predict


def torch_autograd_rule(fn, out_meta=None, unreached=None, layout_hints=False):
    """A rule that differentiates ``fn`` (a torch callable) with torch's autograd
    (see [Note: differentiating with torch's autograd]).

    ``out_meta(*args, **kwargs)`` gives the outputs' (shape, dtype, device); without it torch's meta
    kernel is run. ``unreached(args, kwargs)``: the positions of the tensors requiring grad that get no gradient
    (None, as in eager), which are then no inputs of the graph. ``layout_hints``: note on the outputs and the
    gradients the layouts ``fn``'s kernels give them (``_predicted_layouts``; attention's kernels write them
    otherwise than contiguous, see [Note: layout hints]).
    """

    def rule(*args, **kwargs):
        leaves, spec = tree_flatten((args, kwargs))
        skipped = unreached(args, kwargs) if unreached is not None else ()
        groups = {}  # a tensor passed several times is one input of the graph: its gradient goes to its first place
        for i, a in enumerate(leaves):
            if isinstance(a, TensorProxy) and a.requires_grad and i not in skipped:
                groups.setdefault(a.name, []).append(i)
        first = {name: g[0] for name, g in groups.items()}
        out_like = out_meta(*args, **kwargs) if out_meta is not None else None
        out, graph = torch_autograd_forward_sym(fn, args, kwargs, tuple(tuple(g) for g in groups.values()), out_like)
        flat_out = flat_proxies(out)
        like = tuple((tuple(leaves[i].shape), leaves[i].dtype, leaves[i].device) for i in first.values())
        predict = _layout_predictor(fn, leaves, spec, list(groups.values())) if layout_hints else None
        if predict is not None:
            for i, o in enumerate(flat_out):
                set_layout_hint(o, functools.partial(predict, 0, i))

        def backward(*cotangents, sums=None, parts=frozenset()):
            cts = [g for o, g in zip(flat_out, cotangents) if isinstance(o, TensorProxy)]
            given = tuple(sums.get(name) for name in first) if sums else ()
            # a returned input's gradient reached by several edges: its parts one by one (see _edge_parts)
            counts = _edge_counts(fn, leaves, spec, list(groups.values())) if parts.intersection(first) else None
            split = tuple((k, n) for k, (name, n) in enumerate(zip(first, counts or [len(g) for g in groups.values()]))
                          if name in parts and n > 1)
            extra = {"split": split} if split else {}
            if any(s is not None for s in given):
                grads = torch_autograd_backward_sym(graph, *cts, like=like, sums=given, **extra)
            else:
                grads = torch_autograd_backward_sym(graph, *cts, like=like, **extra)
            flat = [None] * len(leaves)
            grads = iter(grads)
            n_parts = dict(split)
            for k, name in enumerate(first):
                i = groups[name][0]
                flat[i] = EdgeParts(next(grads) for _ in range(n_parts[k])) if k in n_parts else next(grads)
                if predict is not None:
                    for g in (flat[i] if k in n_parts else (flat[i],)):
                        set_layout_hint(g, functools.partial(predict, 1, k))
            grad_args, grad_kwargs = tree_unflatten(flat, spec)
            return ArgGrads(tuple(grad_args), grad_kwargs)

        backward.continues_sums = True  # see [Note: the order of a gradient's sum]
        backward.splits_parts = True  # see _edge_parts
        return out, backward

    return rule
