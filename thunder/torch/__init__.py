"""The torch language: torch's semantics (broadcasting, type promotion, views) as decompositions into prims.

Importing this package registers every torch callable thunder translates; ``TORCH_TO_SYMBOL``
is the resulting table. Symbols print as ``ltorch.<name>``.
"""
from thunder.torch.registry import TORCH_TO_SYMBOL, INPLACE_TO_SYMBOL, SYMBOLS, torchsymbol  # noqa: F401
from thunder.torch import elementwise, reductions, shapes, creation, nn, inplace  # noqa: F401  (registers the ops)
from thunder.torch import grad_rules  # noqa: F401  (gradient rules and backward kernels)
from thunder.torch.elementwise import *  # noqa: F401,F403
from thunder.torch.reductions import *  # noqa: F401,F403
from thunder.torch.shapes import *  # noqa: F401,F403
from thunder.torch.creation import *  # noqa: F401,F403
from thunder.torch.nn import *  # noqa: F401,F403


def __getattr__(name):
    sym = SYMBOLS.get(name)
    if sym is None:
        raise AttributeError(f"thunder.torch has no operation {name!r}")
    return sym
