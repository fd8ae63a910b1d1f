"""Substituting proxies in bound symbols."""
from __future__ import annotations

from thunder.core.codeutils import flat_proxies
from thunder.core.proxies import TensorProxy, NumberProxy
from thunder.core.pytree import tree_map


def substitute(x, mapping: dict):
    """``x`` (a pytree) with every proxy whose name is in ``mapping`` replaced."""

    def replace(y):
        return mapping.get(y.name, y) if isinstance(y, (TensorProxy, NumberProxy)) else y

    return tree_map(replace, x)


def substitute_bsym(bsym, mapping: dict):
    if not mapping:
        return bsym
    return bsym.replace(args=substitute(bsym.args, mapping), kwargs=substitute(bsym.kwargs, mapping),
                        output=substitute(bsym.output, mapping),
                        subsymbols=tuple(substitute_bsym(s, mapping) for s in bsym.subsymbols))


def substitute_inputs(bsym, mapping: dict):
    """``bsym`` reading the proxies of ``mapping`` in place of those named by its keys, its decomposition's too."""
    if not mapping:
        return bsym
    return bsym.replace(args=substitute(bsym.args, mapping), kwargs=substitute(bsym.kwargs, mapping),
                        subsymbols=tuple(substitute_inputs(s, mapping) for s in bsym.subsymbols))


def rename_outputs(bsyms: list, produced, wanted) -> list:
    """Renames the values ``bsyms`` produce as ``produced`` to the proxies of ``wanted``.

    If a wanted output is produced directly from an input (no bound symbol defines it), the
    caller's original bound symbol is expected to handle that case.
    """
    mapping = {}
    for p, w in zip(flat_proxies(produced), flat_proxies(wanted)):
        if p.name != w.name:
            mapping[p.name] = w
    return [substitute_bsym(b, mapping) for b in bsyms]
