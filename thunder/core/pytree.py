"""Nested containers (pytrees), walked one way throughout thunder: as ``torch.utils._pytree`` walks them.

Nodes are the containers torch's pytree knows: tuples, lists, dicts (in insertion order), named tuples,
``torch.Size``, ``torch.return_types``, OrderedDicts, defaultdicts, deques, and the classes libraries register
(Hugging Face's ``ModelOutput``). thunder adds slices, here (their bounds may be traced numbers), and its input
lists and dicts (in thunder/driver/frontend.py). The registry is torch's, so these are nodes for every user of
``torch.utils._pytree`` in the process. Everything else is a leaf.

``tree_flatten`` and ``tree_unflatten`` are torch's. ``tree_leaves`` and ``tree_map`` give what torch's functions of
the same names give; they walk plain tuples, lists and dicts directly, without building tree specs, as they run on
every operation recorded while tracing.
"""
from __future__ import annotations

from collections import namedtuple

from torch.utils._pytree import SUPPORTED_NODES, is_namedtuple_class, register_pytree_node, tree_flatten, tree_unflatten

__all__ = ["maybe_node", "register_pytree_node", "tree_flatten", "tree_leaves", "tree_map", "tree_unflatten"]

_NAMED_TUPLE = SUPPORTED_NODES[namedtuple]  # one node type for all named tuple classes, as torch's pytree has it


def maybe_node(x) -> bool:
    """False where ``x`` is certainly a leaf; True for every container the walk goes into, and for tuples, lists and
    dicts of any class (a fast test before walking arguments that are seldom nested)."""
    return isinstance(x, (tuple, list, dict)) or type(x) in SUPPORTED_NODES


def tree_leaves(tree) -> list:
    """The leaves of ``tree``, in order."""
    leaves = []
    _collect(tree, leaves)
    return leaves


def _collect(x, leaves: list):
    t = type(x)
    if t is tuple or t is list:
        for y in x:
            _collect(y, leaves)
    elif t is dict:
        for y in x.values():
            _collect(y, leaves)
    else:
        node = _NAMED_TUPLE if issubclass(t, tuple) and is_namedtuple_class(t) else SUPPORTED_NODES.get(t)
        if node is None:
            leaves.append(x)
        else:
            for y in node.flatten_fn(x)[0]:
                _collect(y, leaves)


def tree_map(fn, tree):
    """``tree`` with each leaf ``x`` replaced by ``fn(x)``, in rebuilt containers."""
    t = type(tree)
    if t is tuple:
        return tuple([tree_map(fn, y) for y in tree])
    if t is list:
        return [tree_map(fn, y) for y in tree]
    if t is dict:
        return {k: tree_map(fn, v) for k, v in tree.items()}
    node = _NAMED_TUPLE if issubclass(t, tuple) and is_namedtuple_class(t) else SUPPORTED_NODES.get(t)
    if node is None:
        return fn(tree)
    children, context = node.flatten_fn(tree)
    return node.unflatten_fn([tree_map(fn, y) for y in children], context)


def _slice_flatten(s: slice):
    return [s.start, s.stop, s.step], None


def _slice_unflatten(values, context) -> slice:
    return slice(*values)


register_pytree_node(slice, _slice_flatten, _slice_unflatten, serialized_type_name="builtins.slice")
