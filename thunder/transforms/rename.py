"""Substituting proxies in bound symbols."""
from __future__ import annotations

from thunder.core.proxies import TensorProxy, NumberProxy


def substitute(x, mapping: dict):
    """``x`` with every proxy whose name is in ``mapping`` replaced."""
    if isinstance(x, (TensorProxy, NumberProxy)):
        return mapping.get(x.name, x)
    if isinstance(x, tuple):
        if hasattr(x, "_fields"):
            return type(x)(*(substitute(y, mapping) for y in x))
        items = tuple(substitute(y, mapping) for y in x)
        return type(x)(items) if type(x) is not tuple else items
    if isinstance(x, list):
        return [substitute(y, mapping) for y in x]
    if isinstance(x, dict):
        return {k: substitute(v, mapping) for k, v in x.items()}
    if isinstance(x, slice):
        return slice(substitute(x.start, mapping), substitute(x.stop, mapping), substitute(x.step, mapping))
    return x


def substitute_bsym(bsym, mapping: dict):
    if not mapping:
        return bsym
    return bsym.replace(args=substitute(bsym.args, mapping), kwargs=substitute(bsym.kwargs, mapping),
                        output=substitute(bsym.output, mapping),
                        subsymbols=tuple(substitute_bsym(s, mapping) for s in bsym.subsymbols))


def rename_outputs(bsyms: list, produced, wanted) -> list:
    """Renames the values ``bsyms`` produce as ``produced`` to the proxies of ``wanted``.

    If a wanted output is produced directly from an input (no bound symbol defines it), the
    caller's original bound symbol is expected to handle that case.
    """
    from thunder.core.codeutils import flat_proxies

    mapping = {}
    for p, w in zip(flat_proxies(produced), flat_proxies(wanted)):
        if p.name != w.name:
            mapping[p.name] = w
    return [substitute_bsym(b, mapping) for b in bsyms]
