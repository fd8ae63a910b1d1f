"""A seeded generator of small PyTorch programs, and a differential runner that checks thunder against eager.

``generate(seed)`` returns a :class:`Program`: Python source text of a function ``program(a, b, ...)`` over 1-3
input tensors, plus a description of the inputs (shape, dtype, layout: contiguous, transposed, sliced with a step,
expanded; whether they require grad). The program is built statement by statement from a table of op rules; every
statement is run in eager on example inputs as it is chosen, and a statement eager refuses is not kept, so each
program runs in eager (and its backward too, in grad mode).

``run_program(program)`` runs the program in eager and under ``thunder.jit`` and compares outputs bitwise (dtype,
shape, values NaN-equal and sign of zero, strides of the dimensions longer than 1), updated inputs, gradients of
``sum(out * cotangent)`` for a fixed random cotangent, and a second call with fresh inputs of the same kind (the
cache-hit path). It returns a :class:`Result` whose ``kind`` is one of OK, WRONG, CRASH, REFUSED, DISCARD.

``Program.repro()`` is a standalone script that reproduces a failure.
"""
from __future__ import annotations

import dataclasses
import linecache
import math
import random
import traceback
from typing import Any

import warnings

import torch

warnings.filterwarnings("ignore")

# --------------------------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------------------------

FLOATS = (torch.float32, torch.float64)


@dataclasses.dataclass
class InputSpec:
    shape: tuple
    dtype: torch.dtype
    layout: str  # contiguous | transposed | sliced | expanded
    requires_grad: bool = False
    grad_on_base: bool = False  # gradient taken w.r.t. the contiguous base tensor (the input is then a non-leaf)

    def source(self, gen: str = "g") -> str:
        """Python expression that builds this input from generator ``gen`` (the base tensor, then the layout)."""
        shape, dt = list(self.shape), _dtype_name(self.dtype)
        if self.layout == "transposed" and len(shape) >= 2:
            base_shape = shape[:-2] + [shape[-1], shape[-2]]
            post = ".mT"
        elif self.layout == "sliced" and len(shape) >= 1:
            base_shape = shape[:-1] + [shape[-1] * 2]
            post = "[..., ::2]"
        elif self.layout == "expanded" and len(shape) >= 1:
            base_shape = [1] + shape[1:]
            post = f".expand({', '.join(map(str, shape))})"
        else:
            base_shape, post = shape, ""
        size = "(" + "".join(f"{s}, " for s in base_shape) + ")"
        cpu = ", device='cpu'" if DEVICE is not None else ""  # drawn on the CPU: the same values on every device
        if self.dtype == torch.bool:
            base = f"(torch.randn({size}, generator={gen}{cpu}) > 0)"
        elif self.dtype == torch.int64:
            base = f"torch.randint(-4, 5, {size}, generator={gen}{cpu})"
        else:
            base = f"torch.randn({size}, generator={gen}, dtype={dt}{cpu})"
        if DEVICE is not None:
            base += f".to({DEVICE!r})"
        if self.requires_grad:
            if self.grad_on_base:
                return f"{base}.requires_grad_(){post}"
            return f"{base}{post}.detach().requires_grad_()" if post else f"{base}.requires_grad_()"
        return base + post


def _dtype_name(dt: torch.dtype) -> str:
    return "torch." + str(dt).split(".")[-1]


def _tensor_leaves(x):
    """The tensors whose gradient is taken for input ``x`` (the leaf, or the base of a view-of-a-leaf input)."""
    if x.is_leaf:
        return x
    return x._base if x._base is not None else x


# --------------------------------------------------------------------------------------------------------------------
# The program
# --------------------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Program:
    seed: int
    inputs: list
    body: list  # lines of the function body (indented by 4 already for nested blocks)
    outputs: list
    grad: bool  # inputs require grad (no in-place updates of inputs)
    tags: set = dataclasses.field(default_factory=set)  # the rules used, for statistics
    nn: bool = False  # generated with the neural-network rules (``generate(seed, nn=True)``)

    @property
    def arg_names(self):
        return [f"x{i}" for i in range(len(self.inputs))]

    @property
    def source(self) -> str:
        lines = [f"def program({', '.join(self.arg_names)}):"]
        lines += ["    " + ln for ln in self.body]
        lines.append(f"    return {', '.join(self.outputs)}" + ("," if len(self.outputs) == 1 else ""))
        return "import torch\nimport torch.nn.functional as F\n\n\n" + "\n".join(lines) + "\n"

    def inputs_source(self, seed_expr: str = "0") -> str:
        lines = [f"g = torch.Generator().manual_seed({seed_expr})"]
        lines.append("inputs = [" + ", ".join(s.source() for s in self.inputs) + "]")
        return "\n".join(lines)

    def load(self):
        """The program as a function, compiled from a file name registered in linecache (for tracebacks)."""
        filename = f"<generated program {self.seed}>"
        src = self.source
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        ns: dict = {}
        exec(compile(src, filename, "exec"), ns)
        return ns["program"]

    def make_inputs(self, seed: int) -> list:
        ns = {"torch": torch}
        exec(self.inputs_source(str(seed)), ns)
        return ns["inputs"]

    def repro(self, executors: list | None = None) -> str:
        """A standalone script running the program eagerly and jitted (with ``executors``: a fused run compares bit
        for bit too, so rounding shows as a difference)."""
        grad = self.grad
        lines = [
            "# standalone repro generated by tests/program_generator.py (seed %d%s)" % (self.seed, ", nn=True" * self.nn),
            self.source.rstrip("\n"),
            *([f"torch.set_default_device({DEVICE!r})", "torch.use_deterministic_algorithms(True, warn_only=True)"]
              if DEVICE is not None else []),
            "",
            "",
            "import thunder",
            "from torch.utils._pytree import tree_leaves",
            "",
            "def run(f, s):",
            "    " + self.inputs_source("s").replace("\n", "\n    "),
            "    out = f(*inputs)",
        ]
        if grad:
            lines += [
                "    outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]",
                "    leaves = [x if x.is_leaf else x._base for x in inputs if x.requires_grad]",
                "    gen = torch.Generator().manual_seed(7)  # one for all outputs, as the fuzzer's",
                "    cots = [torch.randn(o.shape, generator=gen, dtype=o.dtype, device='cpu').to(o.device) for o in outs]",
                "    grads = torch.autograd.grad(outs, leaves, cots, allow_unused=True) if outs else ()",
                "    return out, grads, inputs",
            ]
        else:
            lines.append("    return out, (), inputs")
        lines += [
            "",
            f"jprogram = thunder.jit(program{f', executors={executors!r}' if executors else ''})",
            "for s in (0, 1):  # first call, then the cache-hit path",
            "    e, t = run(program, s), run(jprogram, s)",
            "    for name, a, b in zip(('outputs', 'grads', 'inputs'), e, t):",
            "        for x, y in zip(tree_leaves(a), tree_leaves(b)):",
            "            if isinstance(x, torch.Tensor):  # bit for bit, signs of zeros too",
            "                x_, y_ = (torch.view_as_real(v.detach()) if v.is_complex() else v.detach() for v in (x, y))",
            "                same = (x.dtype == y.dtype and x.shape == y.shape and torch.equal(x_.nan_to_num(1.5), y_.nan_to_num(1.5))",
            "                        and (not x_.is_floating_point() or torch.equal(x_.signbit(), y_.signbit())))",
            "            else:",
            "                same = x is y or x == y",
            "            print(s, name, 'OK' if same else f'DIFFERENT\\n eager:  {x}\\n thunder: {y}')",
        ]
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------------------------------------------------

UNARY_FUNCS = ["exp", "log", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "neg", "sqrt", "rsqrt", "floor",
               "ceil", "round", "sign", "reciprocal", "erf", "log1p", "expm1", "square", "trunc", "frac", "exp2",
               "log2", "atan", "sinh", "logical_not", "isnan", "isfinite", "nan_to_num", "bitwise_not", "sgn",
               "log_softmax_", "signbit", "deg2rad", "erfinv", "lgamma", "digamma", "i0"]
UNARY_F = ["F.gelu({t})", "F.silu({t})", "F.softplus({t})", "F.leaky_relu({t}, 0.1)", "F.elu({t})",
           "F.hardtanh({t})", "F.relu6({t})", "F.mish({t})", "F.gelu({t}, approximate='tanh')", "F.logsigmoid({t})",
           "F.hardswish({t})", "F.normalize({t}, dim=-1)", "F.dropout({t}, p=0.0)", "F.dropout({t}, 0.5, training=False)",
           "F.layer_norm({t}, {t}.shape[-1:])", "F.softsign({t})", "F.tanhshrink({t})", "F.selu({t})"]
BINARY_OPS = ["+", "-", "*", "/", "**", "//", "%"]
BINARY_FUNCS = ["add", "sub", "mul", "div", "maximum", "minimum", "atan2", "fmod", "remainder", "pow", "hypot",
                "floor_divide", "true_divide", "logaddexp", "copysign", "xlogy", "fmax", "fmin"]
CMP_OPS = ["<", "<=", ">", ">=", "==", "!="]
CMP_FUNCS = ["lt", "le", "gt", "ge", "eq", "ne"]
REDUCTIONS = ["sum", "mean", "amax", "amin", "var", "std", "logsumexp", "prod", "cumsum", "cumprod", "argmax",
              "argmin", "max", "min", "norm", "all", "any", "nansum", "count_nonzero", "median", "logcumsumexp",
              "var_mean", "std_mean", "aminmax", "cummax"]
INPLACE_METHODS = ["add_({v})", "mul_({v})", "sub_({v})", "div_({v})", "clamp_(min=-0.5)", "clamp_(max=0.5)",
                   "zero_()", "fill_({s})", "copy_({v})", "relu_()", "exp_()", "neg_()", "abs_()", "sigmoid_()",
                   "tanh_()", "masked_fill_({t} > 0, {s})", "addcmul_({v}, {v}, value=0.5)", "pow_(2)",
                   "clamp_(-1, 1)", "floor_()", "lerp_({v}, 0.3)", "sqrt_()", "add_({v}, alpha=2)"]
SHAPE_INPLACE_METHODS = ["t_()", "unsqueeze_(0)", "squeeze_()", "transpose_(0, -1)"]


class _Gen:
    def __init__(self, seed: int, nn: bool = False):
        self.seed = seed
        self.nn = nn
        self.rng = random.Random(seed)
        rng = self.rng
        self.grad = rng.random() < 0.5
        n_inputs = rng.choice([1, 2, 2, 3, 3])
        self.inputs = []
        self.n_new = 0
        base_shape = [rng.randint(1, 5) for _ in range(rng.choice([0, 1, 2, 2, 3, 3, 4]))]
        for i in range(n_inputs):
            shape = self._related_shape(base_shape) if i and rng.random() < 0.7 else \
                [rng.randint(1, 5) for _ in range(rng.choice([0, 1, 2, 3, 4]))]
            r = rng.random()
            dtype = torch.float32 if r < 0.72 else torch.float64 if r < 0.84 else torch.int64 if r < 0.94 else torch.bool
            layout = "contiguous"
            r = rng.random()
            if r < 0.15 and len(shape) >= 2:
                layout = "transposed"
            elif r < 0.27 and len(shape) >= 1:
                layout = "sliced"
            elif r < 0.35 and len(shape) >= 1 and shape[0] > 1:
                layout = "expanded"
            rg = self.grad and dtype in FLOATS
            self.inputs.append(InputSpec(tuple(shape), dtype, layout, rg, rg and layout != "contiguous" and rng.random() < 0.5))
        self.body: list[str] = []
        self.tags: set[str] = set()
        self.inputs_names = [f"x{i}" for i in range(n_inputs)]
        self.env: dict[str, Any] = self.fresh_env()
        self.names: list[str] = list(self.inputs_names)  # tensor names in order of definition
        self.intermediate: set[str] = set()  # names defined by the program (not inputs, nor views of inputs)
        self.view_of: dict[str, str] = {}  # view name -> name of the tensor it views (root)
        self.mutated_via_view: list[str] = []

    def _related_shape(self, shape):
        rng = self.rng
        s = list(shape)
        r = rng.random()
        if r < 0.3:
            return s
        if r < 0.6 and s:  # broadcastable: some dims 1, maybe fewer dims
            s = [1 if rng.random() < 0.4 else d for d in s]
            return s[rng.randint(0, len(s)):] if rng.random() < 0.3 else s
        if r < 0.8 and s:  # for matmul: (..., k, n) from (..., m, k)
            return s[:-1] + [s[-1]] if len(s) < 2 else s[:-2] + [s[-1], rng.randint(1, 5)]
        return s + [rng.randint(1, 4)]

    # ---- helpers
    def new(self) -> str:
        self.n_new += 1
        return f"t{self.n_new}"

    def tensors(self, pred=lambda t: True):
        return [n for n in self.names if isinstance(self.env.get(n), torch.Tensor) and pred(self.env[n])]

    def start(self):
        """A rule's usual start: a tensor picked to work on, the generator, its shape and rank, a new name; None when
        there is no tensor yet."""
        t = self.pick()
        if t is None:
            return None
        shape = self.shape_list(t)
        return t, self.rng, shape, len(shape), self.new()

    def pick(self, pred=lambda t: True, prefer_recent=True):
        c = self.tensors(pred)
        if not c:
            return None
        if prefer_recent and self.rng.random() < 0.6:
            return c[-1] if self.rng.random() < 0.5 else self.rng.choice(c[-3:])
        return self.rng.choice(c)

    def scalar(self, t=None):
        rng = self.rng
        r = rng.random()
        if r < 0.45:
            return repr(rng.choice([0.5, 2.0, -1.5, 3.0, 0.25, 1e-3, -0.0, 1.0]))
        if r < 0.8:
            return repr(rng.choice([1, 2, -3, 0, 5]))
        if r < 0.9 and t is not None:
            return rng.choice([f"{t}.shape[-1]" if self.env[t].dim() else "2", f"{t}.numel()", f"{t}.dim()",
                               f"len({t})" if self.env[t].dim() else f"{t}.ndim"])
        return rng.choice(["True", "3.5", "-2"])

    def broadcast_partner(self, t):
        """A tensor name broadcastable with ``t`` (other than t), or None."""
        shape = self.env[t].shape
        cands = []
        for n in self.tensors():
            if n == t:
                continue
            try:
                torch.broadcast_shapes(shape, self.env[n].shape)
                cands.append(n)
            except RuntimeError:
                pass
        return self.rng.choice(cands) if cands else None

    def dim(self, t, allow_none=False):
        nd = self.env[t].dim()
        if nd == 0:
            return self.rng.choice([0, -1]) if not allow_none else None
        d = self.rng.randrange(nd)
        return d - nd if self.rng.random() < 0.3 else d

    def shape_list(self, t):
        return list(self.env[t].shape)

    def fresh_env(self):
        env = {"torch": torch, "F": torch.nn.functional, "math": math}
        for n, v in zip(self.inputs_names, _make_example(self.inputs, self.seed)):
            env[n] = v
        return env

    def emit(self, lines, tag, new_names=(), root_of=None, intermediate=True):
        """Keeps ``lines`` when eager runs the program so far followed by them (on fresh example inputs)."""
        if isinstance(lines, str):
            lines = [lines]
        env = self.fresh_env()
        try:
            exec("\n".join(self.body + lines), env)
        except Exception:
            return False
        for n in new_names:
            v = env.get(n)
            if isinstance(v, torch.Tensor) and (v.numel() > 4000 or v.dim() > 6):
                return False
        self.env = env
        self.body.extend(lines)
        self.tags.add(tag)
        for n in new_names:
            if isinstance(self.env.get(n), torch.Tensor):
                self.names.append(n)
                if intermediate:
                    self.intermediate.add(n)
                if root_of is not None:
                    self.view_of[n] = self.view_of.get(root_of, root_of)
        return True

    def is_input_alias(self, n):
        return n in self.inputs_names or self.view_of.get(n) in self.inputs_names

    # ---- rules
    def r_unary(self):
        t = self.pick()
        if t is None:
            return False
        rng = self.rng
        r = rng.random()
        n = self.new()
        if r < 0.5:
            f = rng.choice(UNARY_FUNCS)
            if f == "log_softmax_":
                f = "exp"
            if rng.random() < 0.5:
                return self.emit(f"{n} = torch.{f}({t})", "unary", [n])
            return self.emit(f"{n} = {t}.{f}()", "unary_method", [n])
        if r < 0.85:
            return self.emit(f"{n} = " + rng.choice(UNARY_F).format(t=t), "unary_F", [n])
        return self.emit(f"{n} = " + rng.choice(["-{t}", "abs({t})", "~{t}", "+{t}"]).format(t=t), "unary_operator", [n])

    def r_binary(self):
        t = self.pick()
        if t is None:
            return False
        rng = self.rng
        u = self.broadcast_partner(t) if rng.random() < 0.7 else None
        tag = "binary_broadcast" if u is not None and self.env[u].shape != self.env[t].shape else "binary"
        if u is None:
            u = self.scalar(t)
            tag = "binary_scalar"
        a, b = (t, u) if rng.random() < 0.7 else (u, t)
        n = self.new()
        r = rng.random()
        if r < 0.5:
            op = rng.choice(BINARY_OPS)
            if op == "**" and tag == "binary_scalar":
                pass
            return self.emit(f"{n} = {a} {op} {b}", tag + "_op", [n])
        f = rng.choice(BINARY_FUNCS)
        if r < 0.85:
            extra = ", alpha=2" if f in ("add", "sub") and rng.random() < 0.3 else ""
            extra = ", rounding_mode='floor'" if f == "div" and rng.random() < 0.3 else extra
            return self.emit(f"{n} = torch.{f}({a}, {b}{extra})", tag + "_fn", [n])
        return self.emit(f"{n} = {t}.{f}({u})", tag + "_method", [n])

    def r_compare_where(self):
        t = self.pick()
        if t is None:
            return False
        rng = self.rng
        u = self.broadcast_partner(t) if rng.random() < 0.5 else None
        u = u or self.scalar()
        c = self.new()
        if rng.random() < 0.6:
            line = f"{c} = {t} {rng.choice(CMP_OPS)} {u}"
        else:
            line = f"{c} = torch.{rng.choice(CMP_FUNCS)}({t}, {u})" if rng.random() < 0.5 else f"{c} = {t}.{rng.choice(CMP_FUNCS)}({u})"
        if not self.emit(line, "compare", [c]):
            return False
        r = rng.random()
        n = self.new()
        if r < 0.5:
            v = self.broadcast_partner(c) or self.scalar()
            w = self.broadcast_partner(c) or self.scalar()
            return self.emit(f"{n} = torch.where({c}, {v}, {w})", "where", [n])
        if r < 0.7:
            v = self.broadcast_partner(c) or t
            return self.emit(f"{n} = {v}.masked_fill({c}, {self.scalar()})", "masked_fill", [n])
        if r < 0.85:
            return self.emit(f"{n} = torch.{rng.choice(['logical_and', 'logical_or', 'logical_xor'])}({c}, {t} > 0)", "logical", [n])
        return self.emit(f"{n} = {c}.float() * {t}", "mask_mul", [n])

    def r_reduce(self):
        t = self.pick()
        if t is None:
            return False
        rng = self.rng
        f = rng.choice(REDUCTIONS)
        nd = self.env[t].dim()
        n = self.new()
        args = []
        r = rng.random()
        if f in ("cumsum", "cumprod", "logcumsumexp", "cummax"):
            args.append(str(self.dim(t)))
        elif r < 0.25 and f not in ("median", "cummax"):
            pass
        elif r < 0.45 and nd >= 2 and f in ("sum", "mean", "amax", "amin", "var", "std", "logsumexp", "nansum", "norm", "count_nonzero", "var_mean", "std_mean"):
            dims = rng.sample(range(nd), rng.randint(1, nd))
            args.append(("dim=" if rng.random() < 0.5 else "") + "(" + "".join(f"{d - nd if rng.random() < 0.3 else d}, " for d in dims) + ")")
        else:
            args.append(("dim=" if rng.random() < 0.3 else "") + str(self.dim(t)))
        if args and rng.random() < 0.4 and f not in ("cumsum", "cumprod", "logcumsumexp", "cummax"):
            args.append("keepdim=True" if rng.random() < 0.7 else "keepdim=False")
        if f in ("var", "std", "var_mean", "std_mean") and rng.random() < 0.5:
            args.append(rng.choice(["correction=0", "unbiased=False", "correction=2"]))
        if f in ("sum", "mean", "cumsum", "prod") and rng.random() < 0.15:
            args.append("dtype=torch.float64")
        if f == "logsumexp" and not args:
            args.append(str(self.dim(t)))
        a = ", ".join(args)
        if f == "median":  # eager's CPU median of an expanded tensor (stride 0) reads garbage: it has a clone() here
            t = f"{t}.contiguous()"
        style = rng.random()
        if style < 0.5:
            line = f"{n} = torch.{f}({t}{', ' + a if a else ''})"
        else:
            line = f"{n} = {t}.{f}({a})"
        if f in ("max", "min", "median", "var_mean", "std_mean", "aminmax", "cummax"):
            line = line + (rng.choice(["[0]", "[1]", ".values", ".indices"]) if f not in ("var_mean", "std_mean", "aminmax") else rng.choice(["[0]", "[1]"]))
            if "values" in line or "indices" in line or "[1]" in line and f in ("max", "min", "median", "cummax"):
                pass
            if not args and f in ("max", "min", "median"):
                line = line.split("[")[0].split(".values")[0].split(".indices")[0]
        return self.emit(line, "reduce_" + f, [n])

    def r_softmax(self):
        t = self.pick()
        if t is None:
            return False
        rng = self.rng
        n = self.new()
        f = rng.choice(["softmax", "log_softmax"])
        d = self.dim(t)
        dt = ", dtype=torch.float64" if rng.random() < 0.15 else ""
        style = rng.random()
        if style < 0.4:
            line = f"{n} = torch.{f}({t}, {d}{dt})"
        elif style < 0.8:
            line = f"{n} = F.{f}({t}, dim={d}{dt})"
        else:
            line = f"{n} = {t}.{f}({d})"
        return self.emit(line, "softmax", [n])

    def r_matmul(self):
        rng = self.rng
        t = self.pick(lambda x: x.dim() >= 1 and x.dtype in FLOATS)
        if t is None:
            return False
        shape = self.shape_list(t)
        # partner: an existing tensor that fits, or a tensor built inside the program
        k = shape[-1]
        cands = [n for n in self.tensors(lambda x: x.dim() >= 1 and x.dtype == self.env[t].dtype)
                 if (self.env[n].dim() == 1 and self.env[n].shape[0] == k)
                 or (self.env[n].dim() >= 2 and self.env[n].shape[-2] == k)]
        n = self.new()
        r = rng.random()
        if cands and r < 0.5:
            u = rng.choice(cands)
            style = rng.choice(["{a} @ {b}", "torch.matmul({a}, {b})", "{a}.matmul({b})"])
            return self.emit(f"{n} = " + style.format(a=t, b=u), "matmul", [n])
        if r < 0.65:
            return self.emit(f"{n} = {t} @ {t}.mT" if len(shape) >= 2 else f"{n} = {t} @ {t}", "matmul_self", [n])
        m = rng.randint(1, 5)
        dt = _dtype_name(self.env[t].dtype)
        w = self.new()
        wline = f"{w} = torch.linspace(-1, 1, {m * k}, dtype={dt}).reshape({m}, {k})"
        r = rng.random()
        if r < 0.4:
            bias = f", torch.arange({m}, dtype={dt}) / 4" if rng.random() < 0.5 else ""
            return self.emit([wline, f"{n} = F.linear({t}, {w}{bias})"], "linear", [w, n])
        if r < 0.6 and len(shape) == 3:
            return self.emit([wline, f"{n} = torch.bmm({t}, {w}.mT.expand({shape[0]}, {k}, {m}))"], "bmm", [w, n])
        if r < 0.8 and len(shape) == 2:
            return self.emit([wline, f"{n} = torch.mm({t}, {w}.t())"], "mm", [w, n])
        return self.emit([wline, f"{n} = {t} @ {w}.T"], "matmul_weight", [w, n])

    def r_view(self):
        start = self.start()
        if start is None:
            return False
        t, rng, shape, nd, n = start
        opts = []
        numel = math.prod(shape)
        opts.append(f"{t}.view(-1)")
        opts.append(f"{t}.reshape(-1)")
        opts.append(f"{t}.flatten()")
        opts.append(f"{t}.unsqueeze({rng.randint(-nd - 1, nd)})")
        opts.append(f"{t}[None]")
        opts.append(f"{t}.detach()")
        opts.append(f"{t}.contiguous()")
        opts.append(f"{t}.clone()")
        if nd >= 1:
            d = self.dim(t)
            opts.append(f"{t}.view({t}.size(0), -1)" if nd >= 1 else f"{t}.view(1)")
            opts.append(f"{t}.reshape({', '.join(map(str, reversed(shape)))})")
            opts.append(f"{t}.narrow({d}, {rng.randint(0, max(0, shape[d] - 1))}, 1)")
            opts.append(f"{t}.squeeze({d})" if rng.random() < 0.6 else f"{t}.squeeze()")
            opts.append(f"{t}[{rng.randint(-shape[0], shape[0] - 1)}]")
            opts.append(f"{t}[{rng.choice(['1:', ':-1', '::2', '1::2', ':', '0:1', '-2:'])}]")
            opts.append(f"{t}[..., {rng.choice(['1:', '::2', '0', '-1', 'None', ':1'])}]")
            opts.append(f"{t}.expand({rng.randint(1, 3)}, *{t}.shape)")
            opts.append(f"{t}.select({d}, 0)")
            opts.append(f"{t}.unflatten({d}, ({shape[d]}, 1))")
            opts.append(f"{t}.view_as({t})")
            opts.append(f"{t}[torch.tensor([{', '.join(str(rng.randint(-shape[0], shape[0] - 1)) for _ in range(rng.randint(1, 4)))}])]")
            opts.append(f"{t}[{t} > 0]")
            opts.append(f"{t}.unbind({d})[0]")
            opts.append(f"{t}.movedim({d}, 0)")
            opts.append(f"{t}.roll(1, {d})")
            opts.append(f"{t}.flip({d})")
            opts.append(f"{t}.repeat({', '.join('2' if rng.random() < 0.3 else '1' for _ in shape)})")
            if shape[d] == 1:
                opts.append(f"{t}.expand({', '.join(str(rng.randint(1, 4)) if i == (d % nd) else '-1' for i in range(nd))})")
        if nd >= 2:
            p = list(range(nd))
            rng.shuffle(p)
            opts.append(f"{t}.permute({', '.join(map(str, p))})")
            opts.append(f"{t}.permute(*{p})" if rng.random() < 0.5 else f"torch.permute({t}, {tuple(p)})")
            opts.append(f"{t}.transpose({rng.randrange(nd)}, {rng.randrange(nd) - nd})")
            opts.append(f"{t}.mT")
            opts.append(f"{t}.diagonal()")
            opts.append(f"{t}.view({shape[0] * shape[1]}, *{t}.shape[2:])")
            opts.append(f"{t}[:, {rng.choice(['1:', '::2', '0', '-1', 'None', '1:3:2'])}]")
            opts.append(f"{t}[{rng.choice(['1:', '0', '...', 'None', ':'])}, ..., {rng.choice(['::2', '0', ':1', 'None'])}]")
            opts.append(f"{t}[:, torch.tensor([0, 0, -1])]")
            opts.append(f"{t}.flatten(0, 1)")
            opts.append(f"{t}.reshape({t}.shape[0], -1).t()")
            opts.append(f"{t}.tril()" if rng.random() < 0.5 else f"{t}.triu(1)")
            if nd == 2:
                opts.append(f"{t}.t()")
            if shape[-1] > 1:
                opts.append(f"{t}.unfold({nd - 1}, 2, 1)")
        if nd == 0:
            opts.append(f"{t}.view(1, 1)")
            opts.append(f"{t}.expand(3)")
            opts.append(f"{t}[...]")
            opts.append(f"{t}[None, ..., None]")
        if numel > 0:
            opts.append(f"{t}.reshape(1, {numel}, 1)")
        expr = rng.choice(opts)
        if rng.random() < 0.15:
            expr = f"{expr}{rng.choice(['[0]', '.t()', '.view(-1)', '[..., ::2]', '.unsqueeze(0)'])}"
        return self.emit(f"{n} = {expr}", "view", [n], root_of=t, intermediate=not self.is_input_alias(t))

    def r_shape_flow(self):
        """Python control flow on shapes and sizes."""
        t = self.pick(lambda x: x.dim() >= 1)
        if t is None:
            return False
        rng = self.rng
        n = self.new()
        shape = self.shape_list(t)
        cond = rng.choice([f"{t}.shape[0] > 2", f"{t}.size(-1) == 1", f"{t}.numel() >= 6", f"{t}.dim() == 2",
                           f"len({t}) % 2 == 0", f"{t}.shape[-1] > {t}.shape[0]", f"{t}.ndim > 1 and {t}.size(1) > 1"])
        a = rng.choice([f"{t} * {t}.shape[0]", f"{t}.sum(0)", f"{t}.flip(0)", f"{t} / {t}.numel()", f"{t}[1:]",
                        f"{t}.view({t}.size(0), -1)[:, 0]"])
        b = rng.choice([f"{t} + 1", f"{t}.mean(-1)", f"{t}.clone()", f"{t}[:1] * {t}.size(-1)", f"{t}.exp()"])
        lines = [f"if {cond}:", f"    {n} = {a}", "else:", f"    {n} = {b}"]
        return self.emit(lines, "shape_control_flow", [n])

    def r_cat_stack(self):
        start = self.start()
        if start is None:
            return False
        t, rng, shape, nd, n = start
        r = rng.random()
        if r < 0.3:
            same = [u for u in self.tensors(lambda x: x.shape == self.env[t].shape)]
            parts = [rng.choice(same) for _ in range(rng.randint(1, 3))]
            return self.emit(f"{n} = torch.stack([{', '.join(parts)}], {rng.randint(-nd - 1, nd)})", "stack", [n])
        if r < 0.6 and nd >= 1:
            d = self.dim(t)
            same = [u for u in self.tensors(lambda x: x.dim() == nd and all(x.shape[i] == shape[i] for i in range(nd) if i != d % nd))]
            parts = [rng.choice(same) for _ in range(rng.randint(1, 3))]
            f = rng.choice(["torch.cat", "torch.concat", "torch.cat"])
            return self.emit(f"{n} = {f}([{', '.join(parts)}], dim={d})", "cat", [n])
        if nd >= 1:
            d = self.dim(t)
            f = rng.choice([f"torch.split({t}, {rng.randint(1, 3)}, {d})", f"{t}.chunk({rng.randint(1, 3)}, {d})",
                            f"{t}.split([1, {t}.shape[{d}] - 1], {d})", f"torch.tensor_split({t}, 2, {d})",
                            f"{t}.unbind({d})"])
            idx = rng.choice(["[0]", "[-1]"])
            return self.emit(f"{n} = {f}{idx}", "split", [n], root_of=t, intermediate=not self.is_input_alias(t))
        return False

    def r_cast(self):
        t = self.pick()
        if t is None:
            return False
        rng = self.rng
        n = self.new()
        expr = rng.choice([".float()", ".double()", ".to(torch.float64)", ".to(torch.float32)", ".long()", ".bool()",
                           ".to(torch.int32)", ".to(dtype=torch.float64)", ".type(torch.float32)", ".to({u})",
                           ".to(torch.bfloat16)", ".type_as({u})", ".half().float()"])
        u = self.pick(prefer_recent=False)
        return self.emit(f"{n} = {t}{expr.format(u=u)}", "cast", [n], root_of=t, intermediate=not self.is_input_alias(t))

    def r_clamp(self):
        t = self.pick()
        if t is None:
            return False
        rng = self.rng
        n = self.new()
        u = self.broadcast_partner(t)
        opts = [f"{t}.clamp(-0.5, 0.5)", f"torch.clamp({t}, min=0)", f"{t}.clamp(max=1)", f"torch.clip({t}, -1, 2)",
                f"{t}.clamp_min(0.1)", f"{t}.clamp_max(-0.1)"]
        if u:
            opts += [f"torch.clamp({t}, min={u})", f"{t}.clamp(max={u})", f"{t}.clamp({u}, {u} + 1)"]
        return self.emit(f"{n} = {rng.choice(opts)}", "clamp", [n])

    def _index(self, size, count):
        return [self.rng.randrange(size) for _ in range(count)]

    def r_gather_scatter(self):
        t = self.pick(lambda x: x.dim() >= 1)
        if t is None:
            return False
        rng = self.rng
        shape = self.shape_list(t)
        nd = len(shape)
        d = rng.randrange(nd)
        n = self.new()
        r = rng.random()
        if r < 0.3:
            ishape = [rng.randint(1, s) if i != d else rng.randint(1, 4) for i, s in enumerate(shape)]
            vals = torch.tensor([rng.randrange(shape[d]) for _ in range(math.prod(ishape))]).reshape(ishape).tolist()
            idx = f"torch.tensor({vals})"
            if rng.random() < 0.5:
                return self.emit(f"{n} = torch.gather({t}, {d}, {idx})", "gather", [n])
            return self.emit(f"{n} = {t}.gather({d}, {idx})", "gather", [n])
        if r < 0.5:
            idx = f"torch.tensor({self._index(shape[d], rng.randint(1, 4))})"
            return self.emit(f"{n} = torch.index_select({t}, {d}, {idx})" if rng.random() < 0.5 else
                             f"{n} = {t}.index_select({d}, {idx})", "index_select", [n])
        if r < 0.7:
            k = rng.randint(1, 4)
            idx = f"torch.tensor({self._index(shape[d], k)})"
            src_shape = shape[:d] + [k] + shape[d + 1:]
            src = f"torch.ones({tuple(src_shape)}, dtype={t}.dtype)"
            u = self.tensors(lambda x: list(x.shape) == src_shape and x.dtype == self.env[t].dtype)
            if u and rng.random() < 0.7:
                src = rng.choice(u)
            return self.emit(f"{n} = {t}.index_add({d}, {idx}, {src}, alpha=2)" if rng.random() < 0.3 else
                             f"{n} = torch.index_add({t}, {d}, {idx}, {src})", "index_add", [n])
        ishape = [rng.randint(1, s) for s in shape]
        # scatter with unique indices along d for determinism
        if ishape[d] > shape[d]:
            ishape[d] = shape[d]
        cols = []
        for _ in range(math.prod(ishape[:d] + ishape[d + 1:])):
            cols.append(rng.sample(range(shape[d]), ishape[d]))
        idx_t = torch.tensor(cols).reshape(ishape[:d] + ishape[d + 1:] + [ishape[d]]).movedim(-1, d)
        idx = f"torch.tensor({idx_t.tolist()})"
        u = self.tensors(lambda x: list(x.shape) == ishape and x.dtype == self.env[t].dtype)
        src = rng.choice(u) if u and rng.random() < 0.7 else f"torch.full({tuple(ishape)}, 2.5, dtype={t}.dtype)"
        f = rng.choice([f"{t}.scatter({d}, {idx}, {src})", f"torch.scatter_add({t}, {d}, {idx}, {src})",
                        f"{t}.scatter({d}, {idx}, 1.5)", f"{t}.scatter_reduce({d}, {idx}, {src}, 'amax')",
                        f"{t}.scatter({d}, {idx}, {src}, reduce='add')"])
        return self.emit(f"{n} = {f}", "scatter", [n])

    def r_factory(self):
        t = self.pick()
        if t is None:
            return False
        rng = self.rng
        n = self.new()
        f = rng.choice(["torch.zeros_like({t})", "torch.ones_like({t}) * 2", "torch.full_like({t}, 3)",
                        "torch.empty_like({t}).fill_(1.5)", "{t}.new_zeros({t}.shape[-1:])",
                        "torch.arange({t}.numel(), dtype=torch.float32).reshape({t}.shape)",
                        "torch.eye({t}.shape[-1]) if {t}.dim() else torch.ones(())",
                        "{t}.new_tensor([1.0, 2.0])", "torch.tensor(2.0) * {t}", "{t}.new_ones(2, 1)"])
        return self.emit(f"{n} = {f.format(t=t)}", "factory", [n])

    def r_inplace(self):
        """An in-place update of an intermediate, of a view of one, or (forward-only programs) of an input."""
        rng = self.rng
        r = rng.random()
        if r < 0.45:
            # make a view of an intermediate then update it: y = x[1:]; y.mul_(2)
            base = self.pick(lambda x: True)
            if base is None:
                return False
            if self.is_input_alias(base) and self.grad:
                return False
            shape = self.shape_list(base)
            nd = len(shape)
            if nd == 0:
                views = [f"{base}[...]", f"{base}.view(1)", f"{base}.unsqueeze(0)"]
            else:
                views = [f"{base}[1:]", f"{base}[0]", f"{base}[..., ::2]", f"{base}.view(-1)", f"{base}.narrow(0, 0, 1)",
                         f"{base}[:, 1]" if nd >= 2 else f"{base}[-1:]", f"{base}.transpose(0, -1)",
                         f"{base}.unsqueeze(1)", f"{base}.diagonal()" if nd >= 2 else f"{base}[::2]",
                         f"{base}.reshape(-1)", f"{base}.flatten()", f"{base}.squeeze()", f"{base}.mT" if nd >= 2 else f"{base}[None]",
                         f"{base}.split(1)[0]", f"{base}.unbind(0)[-1]", f"{base}.detach()", f"{base}.permute(*range({nd})[::-1])"]
            v = self.new()
            upd = self._update(v)
            lines = [f"{v} = {rng.choice(views)}", upd]
            if rng.random() < 0.5:
                base_update = self._update(base)
                lines.append(base_update)  # then update the base, and use the view later
            tag = "inplace_view_of_input" if self.is_input_alias(base) else "inplace_view"
            ok = self.emit(lines, tag, [v], root_of=base, intermediate=not self.is_input_alias(base))
            if ok:
                self.mutated_via_view.append(base)
            return ok
        if r < 0.6:
            # indexed assignment
            t = self.pick(lambda x: x.dim() >= 1)
            if t is None or (self.is_input_alias(t) and self.grad):
                return False
            u = self.pick(prefer_recent=False)
            idx = rng.choice(["0", "1:", "..., 0", "::2", "-1", "torch.tensor([0, 0])", f"{t} > 0", ":, :1", "None"])
            val = rng.choice([self.scalar(), u, f"{u}.sum()"])
            op = rng.choice(["=", "+=", "*=", "-="])
            tag = "setitem_input" if self.is_input_alias(t) else "setitem"
            return self.emit(f"{t}[{idx}] {op} {val}", tag, [])
        t = self.pick()
        if t is None or (self.is_input_alias(t) and self.grad):
            return False
        tag = "inplace_input" if self.is_input_alias(t) else "inplace"
        if rng.random() < 0.3:
            u = self.broadcast_partner(t) or self.scalar()
            return self.emit(f"{t} {rng.choice(['+=', '-=', '*=', '/='])} {u}", tag + "_operator", [])
        return self.emit(self._update(t), tag, [])

    def _update(self, t):
        rng = self.rng
        m = rng.choice(INPLACE_METHODS if rng.random() > 0.03 else SHAPE_INPLACE_METHODS)
        u = self.pick(prefer_recent=False)
        v = rng.choice([self.scalar(), u, u, f"{u}.mean()"]) if u else self.scalar()
        if rng.random() < 0.15:
            return f"torch.{rng.choice(['relu_', 'sigmoid_', 'exp_', 'sin_'])}({t})"
        if rng.random() < 0.1:
            return f"F.relu({t}, inplace=True)" if rng.random() < 0.5 else f"F.dropout({t}, 0.0, inplace=True)"
        return f"{t}.{m.format(v=v, s=self.scalar(), t=t)}"

    def r_nograd(self):
        t = self.pick()
        if t is None:
            return False
        n = self.new()
        r = self.rng.random()
        if r < 0.5:
            return self.emit(["with torch.no_grad():", f"    {n} = {t} * 2"], "no_grad", [n])
        return self.emit(f"{n} = {t}.detach() + {t}", "detach", [n])

    def r_item(self):
        t = self.pick(lambda x: x.numel() == 1)
        if t is None:
            return False
        n = self.new()
        return self.emit(f"{n} = {t} * {t}.item()", "item", [n])

    def r_misc(self):
        t = self.pick()
        if t is None:
            return False
        rng = self.rng
        n = self.new()
        opts = [f"torch.addcmul({t}, {t}, {t}, value=0.5)", f"torch.lerp({t}, {t}.flip(0) if {t}.dim() else {t}, 0.25)",
                f"{t}.sort(-1)[0] if {t}.dim() else {t}", f"{t}.sort(-1, descending=True).indices if {t}.dim() else {t}",
                f"torch.topk({t}.flatten(), 1).values", f"torch.einsum('...->...', {t})",
                f"torch.baddbmm({t}, {t}, {t}.mT)", f"torch.addmm({t}, {t}, {t}.mT)",
                f"F.pad({t}, (1, 0))", f"F.mse_loss({t}, {t}.flip(-1) if {t}.dim() else {t})",
                f"torch.outer({t}.flatten(), {t}.flatten()[:2])", f"{t}.masked_select({t} > 0)",
                f"torch.nonzero({t})", f"torch.cdist({t}, {t})" if self.env[t].dim() >= 2 else f"{t}.sign()",
                f"torch.trace({t})", f"{t}.where({t} > 0, 0.5)", f"torch.diff({t})", f"{t}.sum(-1, keepdim=True).expand_as({t})",
                f"torch.heaviside({t}, {t})", f"torch.isclose({t}, {t} + 1e-9)", f"torch.flatten({t}, 0)",
                f"{t}.float().var(0, correction=0)", f"torch.cumsum({t}.flatten(), 0)[-1]"]
        return self.emit(f"{n} = {rng.choice(opts)}", "misc", [n])

    def r_select(self):
        """Rows or elements selected by a mask computed from the data (a run-time extent), then sliced, differenced or
        accumulated as graph code does."""
        t = self.pick(lambda x: x.dim() >= 1 and x.dtype != torch.bool)
        if t is None:
            return False
        n = self.new()
        mask = f"{t}.flatten(1).sum(1) > 0" if self.env[t].dim() >= 2 else f"{t} > 0"
        s = f"{t}[{mask}]"
        opts = [s, f"{s}[1:]", f"{s}[:-1]", f"{s}[:2]", f"{s}[-2:]", f"{s}[1:-1]", f"torch.diff({s}, dim=0)",
                f"(lambda s: s[1:] - s[:-1])({s})", f"{s}.cumsum(0)[:-1]", f"torch.cat([{s}[:1], {s}])"]
        return self.emit(f"{n} = {self.rng.choice(opts)}", "select", [n])

    # ---- neural-network ops (``generate(seed, nn=True)``): convolutions, pooling, normalization (batch norm's running
    # statistics updated in place), resampling, attention, losses, embeddings, and shape ops models use
    def r_nn(self):
        t = self.pick(lambda x: x.dim() >= 1 and x.dtype in FLOATS and x.numel() > 0)
        if t is None:
            return False
        rng = self.rng
        shape = self.shape_list(t)
        nd = len(shape)
        dt = _dtype_name(self.env[t].dtype)
        n = self.new()
        if nd in (3, 4) and rng.random() < 0.6:
            return self._nn_spatial(t, shape, dt, n)
        if nd == 2 and rng.random() < 0.5:
            return self._nn_classes(t, shape, dt, n)
        u = self.broadcast_partner(t) if rng.random() < 0.5 else None
        u = u if u is not None and self.env[u].dtype in FLOATS and self.env[u].shape == self.env[t].shape else t
        d = self.dim(t)
        order = rng.choice([1, 2, 3, "float('inf')"])
        opts = [f"torch.roll({t}, {rng.choice([1, -2])}, {d})", f"torch.roll({t}, 1)",
                f"{t}.repeat({', '.join(str(rng.choice([1, 2])) for _ in shape)})",
                f"{t}.repeat_interleave(2, dim={d})", f"F.hardsigmoid({t})", f"F.rms_norm({t}, {t}.shape[-1:])",
                f"F.smooth_l1_loss({t}, {u}.flip({d}))", f"F.huber_loss({t}, {u}, reduction='sum')",
                f"F.binary_cross_entropy_with_logits({t}, torch.sigmoid({u}).detach())",
                f"F.kl_div(F.log_softmax({t}, -1), F.softmax({u}, -1), reduction='batchmean')",
                f"F.cosine_similarity({t}, {u}.flip({d}), dim={d})", f"torch.addcdiv({t}, {u}, {u}.abs() + 1, value=0.5)",
                f"torch.linalg.vector_norm({t}, ord={order}, dim={d})",
                f"F.l1_loss({t}, {u}, reduction='none')", f"torch.chunk({t}, 2, {d})[-1]", f"{t}.unbind({d})[0]",
                f"F.prelu({t}, torch.tensor([0.25], dtype={dt}))", f"torch.diag_embed({t})" if nd <= 2 else f"{t}.flip(0)",
                f"F.softmin({t}, {d})", f"F.celu({t}, 0.5)", f"F.threshold({t}, 0.1, -1.0)",
                f"F.hardshrink({t}, 0.3)", f"F.softshrink({t}, 0.3)", f"F.rrelu({t}, training=False)"]
        if shape[d] % 2 == 0:
            opts.append(f"F.glu({t}, {d})")
        if nd >= 2:
            q = shape[-2]
            opts += [f"{t}.tril()", f"{t}.triu({rng.choice([0, 1, -1])})", f"torch.rot90({t}, 1, (-2, -1))",
                     f"F.scaled_dot_product_attention({t}, {t}, {t})",
                     f"F.scaled_dot_product_attention({t}, {u}, {u}, is_causal=True)",
                     f"F.scaled_dot_product_attention({t}, {t}, {u}, attn_mask=torch.ones({q}, {q}, dtype=torch.bool).tril())",
                     f"F.scaled_dot_product_attention({t}, {t}, {t}, attn_mask=torch.linspace(-1, 0, {q * q}, dtype={dt}).reshape({q}, {q}))",
                     f"torch.einsum('...ij,...kj->...ik', {t}, {u})", f"torch.tensordot({t}, {u}, dims=([{nd - 1}], [{nd - 1}]))",
                     f"F.pairwise_distance({t}, {u})", f"F.prelu({t}, torch.linspace(0, 0.5, {shape[1]}, dtype={dt}))"]
        return self.emit(f"{n} = {rng.choice(opts)}", "nn_misc", [n])

    def _nn_spatial(self, t, shape, dt, n):
        """A convolution, pooling, normalization or resampling of a (N, C, L) or (N, C, H, W) tensor."""
        rng = self.rng
        nd, c = len(shape), shape[1]
        k = rng.randint(1, min(3, *shape[2:]))
        ks = "" if nd == 3 else "2d"
        dim = "1d" if nd == 3 else "2d"
        r = rng.random()
        if r < 0.3:
            w = self.new()
            m = rng.randint(1, 4)
            groups = c if rng.random() < 0.25 else 1
            transposed = rng.random() < 0.2
            wshape = (c, m, *[k] * (nd - 2)) if transposed else ((c if groups > 1 else m), c // groups, *[k] * (nd - 2))
            numel = math.prod(wshape)
            wline = f"{w} = torch.linspace(-1, 1, {numel}, dtype={dt}).reshape{wshape}"
            out_channels = m if transposed else wshape[0]
            bias = f", torch.arange({out_channels}, dtype={dt}) / 4" if rng.random() < 0.4 else ", None"
            stride, padding = rng.choice([1, 1, 2]), rng.choice([0, 0, 1, "'same'"])
            if transposed or stride != 1:
                padding = rng.choice([0, 1]) if k > 1 else 0
            opts = f"stride={stride}, padding={padding}, groups={groups}" if not transposed else \
                f"stride={stride}, padding={padding}"
            if not transposed and rng.random() < 0.2 and padding != "'same'" and stride == 1:
                opts += ", dilation=2"
            f = "conv_transpose" + dim if transposed else "conv" + dim
            return self.emit([wline, f"{n} = F.{f}({t}, {w}{bias}, {opts})"], "nn_conv", [w, n])
        if r < 0.5:
            pad = rng.choice([0, k // 2])
            opts = [f"F.max_pool{dim}({t}, {k}, stride={rng.choice([1, k])}, padding={pad})",
                    f"F.max_pool{dim}({t}, {k}, ceil_mode=True)",
                    f"F.avg_pool{dim}({t}, {k}, padding={pad}, count_include_pad={rng.choice([True, False])})",
                    f"F.adaptive_avg_pool{dim}({t}, {rng.choice([1, 2])})",
                    f"F.adaptive_max_pool{dim}({t}, {rng.choice([1, 2])})",
                    f"F.lp_pool{dim}({t}.abs() + 0.1, 2, {k})",
                    f"F.max_pool{dim}({t}, {k}, return_indices=True)[{rng.choice([0, 1])}]"]
            return self.emit(f"{n} = {rng.choice(opts)}", "nn_pool", [n])
        if r < 0.8:
            w = f"torch.linspace(0.5, 1.5, {c}, dtype={dt})" if rng.random() < 0.5 else "None"
            b = f"torch.linspace(-0.5, 0.5, {c}, dtype={dt})" if rng.random() < 0.5 else "None"
            g = rng.choice([d for d in range(1, c + 1) if c % d == 0])
            if rng.random() < 0.5:
                rm, rv = self.new(), self.new()
                training = rng.choice(["True", "True", "False"])
                lines = [f"{rm} = torch.zeros({c}, dtype={dt})", f"{rv} = torch.ones({c}, dtype={dt})",
                         f"{n} = F.batch_norm({t}, {rm}, {rv}, {w}, {b}, training={training}, momentum={rng.choice([0.1, 0.5])})"]
                return self.emit(lines, "nn_batch_norm", [rm, rv, n])
            opts = [f"F.group_norm({t}, {g}, {w}, {b})", f"F.instance_norm({t})",
                    f"F.batch_norm({t}, None, None, {w}, {b}, training=True)",
                    f"F.layer_norm({t}, {t}.shape[1:])", f"F.local_response_norm({t}, 2)"]
            return self.emit(f"{n} = {rng.choice(opts)}", "nn_norm", [n])
        modes = ["'nearest'", "'linear'" if nd == 3 else "'bilinear'", "'nearest-exact'"] + (["'bicubic'"] if nd == 4 else [])
        mode = rng.choice(modes)
        ac = ", align_corners=True" if "linear" in mode or "cubic" in mode and rng.random() < 0.5 else ""
        size = rng.choice(["scale_factor=2", f"size={tuple(s + 1 for s in shape[2:])}", "scale_factor=0.5"])
        opts = [f"F.interpolate({t}, {size}, mode={mode}{ac})"]
        if nd == 4:
            opts += [f"F.unfold({t}, {k})", f"F.pixel_unshuffle({t}, 1)", f"F.pad({t}, (1, 1, 0, 1), mode='reflect')"
                     if min(shape[2:]) > 1 else f"F.pad({t}, (1, 1, 0, 1))", f"F.pad({t}, (1, 0, 2, 1), mode='replicate')"]
            if c % 4 == 0:
                opts.append(f"F.pixel_shuffle({t}, 2)")
        else:
            opts += [f"F.pad({t}, (2, 1), mode='replicate')", f"F.pad({t}, (1, 1), mode='circular')"]
        return self.emit(f"{n} = {rng.choice(opts)}", "nn_resample", [n])

    def _nn_classes(self, t, shape, dt, n):
        """A loss, embedding or one-hot over a (N, C) tensor of scores."""
        rng = self.rng
        rows, c = shape
        target = f"torch.tensor({[rng.randrange(c) for _ in range(rows)]})"
        red = rng.choice(["'mean'", "'sum'", "'none'"])
        opts = [f"F.cross_entropy({t}, {target}, reduction={red})",
                f"F.cross_entropy({t}, {target}, label_smoothing=0.1)",
                f"F.cross_entropy({t}, {target}, ignore_index={rng.randrange(c)})",
                f"F.cross_entropy({t}, F.softmax({t}.flip(0), -1).detach())",
                f"F.nll_loss(F.log_softmax({t}, 1), {target}, reduction={red})",
                f"F.cross_entropy({t}, {target}, weight=torch.linspace(0.5, 1.5, {c}, dtype={dt}))",
                f"F.embedding(torch.tensor({[rng.randrange(rows) for _ in range(rng.randint(1, 5))]}), {t})",
                f"F.embedding(torch.tensor({[[rng.randrange(rows) for _ in range(2)]]}), {t}, padding_idx=0)",
                f"F.one_hot({t}.argmax(-1), {c}) * {t}", f"F.multi_margin_loss({t}, {target})",
                f"F.multilabel_soft_margin_loss({t}, ({t} > 0).to({dt}))",
                f"F.margin_ranking_loss({t}[0], {t}[-1], torch.ones({c}, dtype={dt}))"]
        return self.emit(f"{n} = {rng.choice(opts)}", "nn_classes", [n])

    def r_advanced_index(self):
        """Indexing by integer index tensors (laid out transposed where 2-D, in one dimension or in two apart), whose
        result ATen lays out after the index tensors; later rules view, reshape and update it."""
        t = self.pick(lambda x: x.dim() >= 1)
        if t is None:
            return False
        rng = self.rng
        shape = self.shape_list(t)
        dims = rng.sample(range(len(shape)), rng.randint(1, min(len(shape), 2)))
        index_shape = [rng.randint(1, 3) for _ in range(rng.randint(1, 2))]
        parts = []
        for d, size in enumerate(shape):
            if d not in dims:
                parts.append(":")
                continue
            values = torch.tensor([rng.randrange(size) for _ in range(math.prod(index_shape))]).reshape(index_shape)
            transposed = len(index_shape) == 2 and rng.random() < 0.5
            parts.append(f"torch.tensor({values.t().tolist()}).t()" if transposed
                         else f"torch.tensor({values.tolist()})")
        while parts and parts[-1] == ":" and rng.random() < 0.5:
            parts.pop()
        n = self.new()
        return self.emit(f"{n} = {t}[{', '.join(parts)}]", "advanced_index", [n])

    RULES = [("r_unary", 12), ("r_binary", 16), ("r_compare_where", 6), ("r_reduce", 10), ("r_softmax", 3),
             ("r_matmul", 6), ("r_view", 16), ("r_shape_flow", 3), ("r_cat_stack", 5), ("r_cast", 4),
             ("r_clamp", 3), ("r_gather_scatter", 5), ("r_factory", 2), ("r_inplace", 16), ("r_nograd", 2),
             ("r_item", 0.3), ("r_misc", 4), ("r_select", 3), ("r_advanced_index", 3)]

    NN_RULES = [("r_nn", 14)]

    def generate(self) -> Program:
        rng = self.rng
        target = rng.randint(3, 10)
        tries = 0
        table = self.RULES + (self.NN_RULES if self.nn else [])
        rules = [r for r, _ in table]
        weights = [w for _, w in table]
        while len([ln for ln in self.body if not ln.startswith(" ")]) < target and tries < 200:
            tries += 1
            rule = rng.choices(rules, weights)[0]
            try:
                getattr(self, rule)()
            except (ValueError, IndexError, RuntimeError, ZeroDivisionError):
                pass  # the rule did not fit the tensors at hand (an empty dimension, ...)
        # outputs: the last tensor, some others, bases updated through views
        names = [n for n in self.names if n not in self.inputs_names]
        outs = []
        if names:
            outs.append(names[-1])
        for n in self.mutated_via_view:
            if n not in outs and n not in self.inputs_names and rng.random() < 0.8:
                outs.append(n)
        for n in rng.sample(names, min(len(names), rng.randint(1, 3))):
            if n not in outs:
                outs.append(n)
        if not outs:
            outs = [f"{self.inputs_names[0]} * 1"]
        if rng.random() < 0.1 and self.names:
            outs.append(f"{self.names[-1]}.shape[0] if {self.names[-1]}.dim() else 0")
        return Program(self.seed, self.inputs, self.body, outs[:4], self.grad, self.tags, self.nn)


def _make_example(specs, seed):
    p = Program(seed, specs, [], [], False)
    return p.make_inputs(seed)


def generate(seed: int, nn: bool = False) -> Program | None:
    """A program for ``seed`` that runs in eager (forward, and backward in grad mode); None if none was found.
    ``nn``: neural-network ops (convolutions, pooling, normalization, losses...) join the rules."""
    for attempt in range(5):
        g = _Gen(seed * 7919 + attempt if attempt else seed, nn)
        prog = g.generate()
        prog.seed = seed
        if not prog.body:
            continue
        try:
            _run_eager(prog, 0)
        except Exception:
            continue
        return prog
    return None


# --------------------------------------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Result:
    seed: int
    kind: str  # OK, WRONG, CRASH, REFUSED, DISCARD
    detail: str = ""
    program: Program | None = None


def _leaves(x):
    from torch.utils._pytree import tree_leaves
    return tree_leaves(x)


def _grad_targets(prog, inputs):
    leaves = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.requires_grad:
            leaf = _tensor_leaves(x)
            if all(leaf is not y for y in leaves):
                leaves.append(leaf)
    return leaves


def _cotangents(outs):
    gen = torch.Generator().manual_seed(7)
    return [torch.randn(o.shape, generator=gen, dtype=o.dtype, device="cpu").to(o.device) for o in outs]


# the device the inputs are moved to (scripts/fuzz_programs.py --device, which also makes it the default device for
# the programs' own factory calls); None: the CPU, and sources that name no device
DEVICE = None
AUTOCAST = None  # a dtype: both runs' forwards under torch.autocast("cpu", dtype=AUTOCAST) (scripts/fuzz_programs.py)


def _forward(fn, inputs):
    import contextlib

    with torch.autocast(DEVICE or "cpu", dtype=AUTOCAST) if AUTOCAST is not None else contextlib.nullcontext():
        return fn(*inputs)


def _run(prog, fn, input_seed, grad=True):
    """(outputs, grads or None or an exception, inputs after the call)."""
    inputs = prog.make_inputs(input_seed)
    out = _forward(fn, inputs)
    grads = None
    if prog.grad and grad:
        outs = [o for o in _leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
        targets = _grad_targets(prog, inputs)
        if outs and targets:
            try:
                grads = torch.autograd.grad(outs, targets, _cotangents(outs), allow_unused=True)
            except Exception as e:  # noqa: BLE001
                grads = e
    return out, grads, inputs


def _run_eager(prog, input_seed):
    fn = prog.load()
    out, grads, inputs = _run(prog, fn, input_seed)
    if isinstance(grads, Exception):
        raise grads
    return out, grads, inputs


def _memory_sharing(out, inputs) -> set:
    """The pairs (output, output or input), by their positions among the tensors, that share memory: eager's views
    are views in thunder and its copies are copies (a later in-place update of one would show in the other, or not)."""
    tensors = [t for t in _leaves(out) if isinstance(t, torch.Tensor)]
    n_out = len(tensors)
    tensors += [t for t in _leaves(inputs) if isinstance(t, torch.Tensor)]

    def memory(t):
        try:
            storage = t.untyped_storage()
        except Exception:  # noqa: BLE001 - a tensor without memory (ZeroTensor)
            return None
        return storage.data_ptr() if storage.nbytes() and t.numel() else None

    ptrs = [memory(t) for t in tensors]
    return {(i, j) for i in range(n_out) for j in range(i + 1, len(tensors)) if ptrs[i] is not None and ptrs[i] == ptrs[j]}


def _layout(t):
    return () if t.numel() == 0 else tuple((st, n) for st, n in zip(t.stride(), t.shape) if n != 1)


def _same_values(a, b):
    if a.dtype.is_floating_point or a.dtype.is_complex:
        an, bn = torch.isnan(a), torch.isnan(b)
        if not torch.equal(an, bn):
            return False
        a2, b2 = a.masked_fill(an, 0), b.masked_fill(bn, 0)
        return torch.equal(a2, b2) and torch.equal(torch.signbit(a2), torch.signbit(b2))
    return torch.equal(a, b)


def compare(e, t, what, check_strides=True, check_requires_grad=False, ref=None):
    """A description of the first difference between eager's ``e`` and thunder's ``t``, or None.

    ``ref``, the same values computed in float64 (``reference_in_float64``), admits float values that differ from
    eager's by rounding only: thunder's are no farther from the float64 values than a few times eager's are."""
    el, tl = _leaves(e), _leaves(t)
    rl = _leaves(ref) if ref is not None else [None] * len(el)
    if len(rl) != len(el):
        rl = [None] * len(el)
    if len(el) != len(tl):
        return f"{what}: {len(el)} values in eager, {len(tl)} in thunder"
    for i, (a, b, r) in enumerate(zip(el, tl, rl)):
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return f"{what}[{i}]: eager {type(a).__name__}, thunder {type(b).__name__}"
        if not isinstance(a, torch.Tensor):
            if a != b and not (isinstance(a, float) and math.isnan(a) and isinstance(b, float) and math.isnan(b)):
                return f"{what}[{i}]: eager {a!r}, thunder {b!r}"
            continue
        if a.dtype != b.dtype:
            return f"{what}[{i}]: dtype eager {a.dtype}, thunder {b.dtype}"
        if a.shape != b.shape:
            return f"{what}[{i}]: shape eager {tuple(a.shape)}, thunder {tuple(b.shape)}"
        a_, b_ = a.detach(), b.detach()
        if not _same_values(a_, b_) and not _rounding_only(a_, b_, r):
            close = ""
            if a.dtype.is_floating_point:
                if torch.equal(torch.nan_to_num(a_, 1.5), torch.nan_to_num(b_, 1.5)):
                    close = " (signs of zeros only)"
                elif torch.allclose(a_, b_, rtol=1e-4, atol=1e-5, equal_nan=True):
                    close = " (within tolerance: rounding)"
                else:
                    close = " (NOT close)"
            return f"{what}[{i}]: values differ{close}\n  eager:   {a_}\n  thunder: {b_}"
        if check_strides and _layout(a) != _layout(b):
            return f"{what}[{i}]: strides eager {a.stride()}, thunder {b.stride()} (shape {tuple(a.shape)})"
        if check_requires_grad and a.requires_grad != b.requires_grad:
            return f"{what}[{i}]: requires_grad eager {a.requires_grad}, thunder {b.requires_grad}"
    return None


def close_values(a, b):
    """Within float tolerance (for runs whose kernels round otherwise than eager's: fusion), bitwise for the rest."""
    if a.dtype.is_floating_point or a.dtype.is_complex:
        low = a.dtype in (torch.float16, torch.bfloat16)
        return torch.allclose(a, b, equal_nan=True, **(dict(rtol=2e-2, atol=2e-2) if low else dict(rtol=1e-4, atol=1e-5)))
    return torch.equal(a, b)


def _rounding_only(e, t, r, factor=4.0, rtol=1e-4, atol=1e-5):
    """Whether thunder's ``t`` is within ``factor`` times eager's ``e`` distance from the float64 values ``r``."""
    if not (isinstance(r, torch.Tensor) and e.dtype.is_floating_point and r.shape == e.shape):
        return False
    r = r.detach().to(torch.float64)
    e64, t64 = e.to(torch.float64), t.to(torch.float64)
    if not torch.equal(torch.isnan(e64), torch.isnan(t64)) or not torch.equal(torch.isinf(e64), torch.isinf(t64)):
        return False
    if not torch.equal(e64[torch.isinf(e64)], t64[torch.isinf(t64)]):
        return False
    fin = torch.isfinite(e64) & torch.isfinite(r)
    if not torch.equal(torch.isfinite(e64), fin):  # the float64 value overflows or is NaN where eager's is finite
        return False
    err_e, err_t = (e64 - r).abs()[fin], (t64 - r).abs()[fin]
    return bool((err_t <= factor * err_e + atol + rtol * r.abs()[fin]).all())


def reference_in_float64(prog: Program, input_seed: int, eager_out):
    """(outputs, grads, inputs after the call) of ``prog`` run in eager in float64 on the inputs of ``input_seed``
    (upcast, with their views kept), with eager's cotangents upcast; None when the program does not run in float64."""
    floats = (torch.float16, torch.bfloat16, torch.float32)
    body = [ln.replace("torch.float32", "torch.float64").replace("torch.float16", "torch.float64")
            .replace("torch.bfloat16", "torch.float64") for ln in prog.body]
    prog64 = dataclasses.replace(prog, body=body)
    up = lambda x: x.detach().to(torch.float64) if x.dtype in floats else x.detach().clone()  # noqa: E731
    try:
        bases, inputs, targets = {}, [], []
        for x in prog.make_inputs(input_seed):
            if not isinstance(x, torch.Tensor):
                inputs.append(x)
                continue
            if x.is_leaf:
                x64 = up(x).requires_grad_(x.requires_grad)
                leaf = x64
            else:
                b = x._base
                if id(b) not in bases:
                    bases[id(b)] = up(b).requires_grad_(b.requires_grad)
                leaf = bases[id(b)]
                x64 = leaf.as_strided(x.size(), x.stride(), x.storage_offset())
            if x.requires_grad and all(leaf is not y for y in targets):
                targets.append(leaf)
            inputs.append(x64)
        out = _forward(prog64.load(), inputs)
        grads = None
        if prog.grad:
            outs = [o for o in _leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
            eouts = [o for o in _leaves(eager_out) if isinstance(o, torch.Tensor) and o.requires_grad]
            if len(outs) != len(eouts):
                return None
            gen = torch.Generator().manual_seed(7)  # as _cotangents
            cots = [torch.randn(o.shape, generator=gen, dtype=o.dtype, device="cpu").to(r.device, r.dtype)
                    for o, r in zip(eouts, outs)]
            if outs and targets:
                grads = torch.autograd.grad(outs, targets, cots, allow_unused=True)
        return out, grads, inputs
    except Exception:  # noqa: BLE001
        return None


REFUSAL_WORDS = ("not supported", "unsupported", "is refused", "refuse", "not yet supported", "cannot be traced",
                 "needs the value of tensor", "not implemented", "does not support", "is not traceable")


def classify_exception(e: BaseException) -> str:
    msg = str(e).lower()
    if type(e).__name__ == "MetadataMismatch":  # a value of another dtype or shape than the trace says (see there)
        return "WRONG"
    if isinstance(e, NotImplementedError) or type(e).__name__ in ("DataDependentError", "ThunderSharpEdgeError"):
        return "REFUSED"
    if isinstance(e, (ValueError, RuntimeError)) and any(w in msg for w in REFUSAL_WORDS):
        return "REFUSED"
    return "CRASH"


def _fmt_exc(e):
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return "".join(tb[-6:])


_OTHER_LAYOUT = {"contiguous": "transposed", "transposed": "sliced", "sliced": "contiguous", "expanded": "contiguous"}


def relaid(prog: Program) -> Program | None:
    """``prog`` with every input of one dimension or more laid out otherwise (contiguous ones transposed or sliced,
    the others contiguous or sliced): the same program and shapes, for a call after the first two that thunder must
    either trace again or run correctly from its cache. None if no input changes."""
    specs = []
    for spec in prog.inputs:
        layout = _OTHER_LAYOUT[spec.layout]
        if layout == "transposed" and len(spec.shape) < 2:
            layout = "sliced"
        if not spec.shape:
            layout = spec.layout
        specs.append(dataclasses.replace(spec, layout=layout, grad_on_base=spec.grad_on_base and layout != "contiguous"))
    if all(a.layout == b.layout for a, b in zip(specs, prog.inputs)):
        return None
    return dataclasses.replace(prog, inputs=specs)


def run_program(prog: Program | None, perturb: bool | int = False, referee64: bool = False, relayout: bool = False) -> Result:
    """Runs ``prog`` in eager and with thunder.jit and compares; ``perturb`` spoils thunder's first output of the first
    call (or of the call it numbers: a self-check).

    With ``referee64`` a float difference from eager (when ``_same_values`` is not bitwise) is rounding, not a wrong
    result, when thunder's values are about as close to the program's values in float64 as eager's are. With
    ``relayout`` a third call passes the inputs laid out otherwise (``relaid``), to the same jitted function."""
    import thunder

    if prog is None:
        return Result(-1, "DISCARD", "no program")
    torch.manual_seed(0)
    try:
        eager_fn = prog.load()
        e1 = _run(prog, eager_fn, 0)
        e2 = _run(prog, eager_fn, 1)
    except Exception as ex:  # noqa: BLE001
        return Result(prog.seed, "DISCARD", f"eager raises: {type(ex).__name__}: {ex}", prog)
    eager_grad_failed = isinstance(e1[1], Exception) or isinstance(e2[1], Exception)
    calls = [(1, e1, prog), (2, e2, prog)]
    if relayout and (other := relaid(prog)) is not None:
        try:
            e3 = _run(other, eager_fn, 2)
            if not isinstance(e3[1], Exception):  # (eager refusing the layouts: no third call)
                calls.append((3, e3, other))
        except Exception:  # noqa: BLE001
            pass
    from metadata_check import CheckMetadata

    jfn = thunder.jit(prog.load(), transforms=[CheckMetadata()])
    for call, e, p in calls:
        stage = "forward"
        try:
            inputs = p.make_inputs(call - 1)
            stage = "forward"
            out = _forward(jfn, inputs)
            if call == 1:
                from thunder.core.trace_checker import check_trace

                check_trace(thunder.last_traces(jfn)[-1])
            if perturb is not False and call == (1 if perturb is True else perturb):
                first = [o for o in _leaves(out) if isinstance(o, torch.Tensor)][0]
                with torch.no_grad():
                    first.view(-1)[0:1].add_(1) if first.numel() and first.dtype != torch.bool else first.logical_not_()
            shared, eager_shared = _memory_sharing(out, inputs), _memory_sharing(e[0], e[2])
            if shared != eager_shared:
                return Result(prog.seed, "WRONG", f"call {call}: outputs sharing memory (with outputs and inputs, by "
                              f"position): eager {sorted(eager_shared)}, thunder {sorted(shared)}", prog)
            grads = None
            if prog.grad and not eager_grad_failed:
                stage = "backward"
                outs = [o for o in _leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
                targets = _grad_targets(p, inputs)
                eouts = [o for o in _leaves(e[0]) if isinstance(o, torch.Tensor) and o.requires_grad]
                if len(outs) != len(eouts):
                    flags = lambda o: [x.requires_grad for x in _leaves(o) if isinstance(x, torch.Tensor)]  # noqa: E731
                    return Result(prog.seed, "WRONG", f"call {call}: outputs' requires_grad: eager {flags(e[0])}, "
                                  f"thunder {flags(out)}", prog)
                if outs and targets:
                    grads = torch.autograd.grad(outs, targets, _cotangents(outs), allow_unused=True)
                if call == 1 and thunder.last_backward_traces(jfn):
                    check_trace(thunder.last_backward_traces(jfn)[-1])
        except Exception as ex:  # noqa: BLE001
            kind = classify_exception(ex)
            return Result(prog.seed, kind, f"call {call} ({stage}): {type(ex).__name__}: {ex}\n{_fmt_exc(ex)}", prog)
        def differences(ref=(None, None, None)):
            diff = compare(e[0], out, f"call {call} outputs", check_requires_grad=prog.grad, ref=ref[0])
            if diff is None and prog.grad and not eager_grad_failed:
                diff = compare(e[1] if e[1] is not None else (), grads if grads is not None else (),
                               f"call {call} grads", check_strides=False, ref=ref[1])
            if diff is None:
                diff = compare(e[2], inputs, f"call {call} inputs after the call", check_strides=False, ref=ref[2])
            return diff

        diff = differences()
        if diff is not None and referee64 and (ref := reference_in_float64(p, call - 1, e[0])) is not None:
            diff = differences(ref)
        if diff is not None:
            return Result(prog.seed, "WRONG", diff, prog)
    return Result(prog.seed, "OK", "", prog)


def check(seed: int) -> Result:
    prog = generate(seed)
    if prog is None:
        return Result(seed, "DISCARD", "no program")
    return run_program(prog)


# --------------------------------------------------------------------------------------------------------------------
# Minimization
# --------------------------------------------------------------------------------------------------------------------

def _signature(res: Result) -> str:
    import re
    first = res.detail.splitlines()[0] if res.detail else ""
    first = re.sub(r"call \d", "call N", first)
    first = re.sub(r"\[\d+\]", "[i]", first)
    first = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", first)
    return res.kind + ": " + first[:80]


def _statements(body):
    groups, cur = [], []
    for ln in body:
        if ln.startswith(" ") or ln.startswith("else"):
            cur.append(ln)
        else:
            if cur:
                groups.append(cur)
            cur = [ln]
    if cur:
        groups.append(cur)
    return groups


def minimize(prog: Program, res: Result | None = None, same_kind_only: bool = False) -> tuple[Program, Result]:
    """Deletes statements, outputs and inputs' layouts while the failure keeps its signature (kind and message)."""
    res = res or run_program(prog)
    sig = _signature(res) if not same_kind_only else res.kind

    def still(p):
        try:
            r = run_program(p)
        except Exception:  # noqa: BLE001
            return None
        if r.kind in ("OK", "DISCARD"):
            return None
        return r if (_signature(r) if not same_kind_only else r.kind) == sig else None

    changed = True
    while changed:
        changed = False
        groups = _statements(prog.body)
        for i in range(len(groups) - 1, -1, -1):
            body = [ln for j, g in enumerate(groups) if j != i for ln in g]
            p = dataclasses.replace(prog, body=body)
            r = still(p)
            if r is not None:
                prog, res, changed = p, r, True
                groups = _statements(prog.body)
                break
        for i in range(len(prog.outputs)):
            if len(prog.outputs) == 1:
                break
            p = dataclasses.replace(prog, outputs=prog.outputs[:i] + prog.outputs[i + 1:])
            r = still(p)
            if r is not None:
                prog, res, changed = p, r, True
                break
        for i, spec in enumerate(prog.inputs):
            for simpler in (dataclasses.replace(spec, layout="contiguous", grad_on_base=False),
                            dataclasses.replace(spec, requires_grad=False, grad_on_base=False)):
                if simpler == spec or (simpler.requires_grad != spec.requires_grad and not any(
                        s.requires_grad for j, s in enumerate(prog.inputs) if j != i)):
                    continue
                p = dataclasses.replace(prog, inputs=prog.inputs[:i] + [simpler] + prog.inputs[i + 1:])
                r = still(p)
                if r is not None:
                    prog, res, changed = p, r, True
                    break
    # drop inputs the program no longer reads
    import re
    text = "\n".join(prog.body + prog.outputs)
    used = [i for i in range(len(prog.inputs)) if re.search(rf"\bx{i}\b", text)]
    if len(used) < len(prog.inputs) and used:
        body, outs = list(prog.body), list(prog.outputs)
        for new, old in enumerate(used):
            body = [re.sub(rf"\bx{old}\b", f"x{new}", ln) for ln in body]
            outs = [re.sub(rf"\bx{old}\b", f"x{new}", ln) for ln in outs]
        p = dataclasses.replace(prog, inputs=[prog.inputs[i] for i in used], body=body, outputs=outs)
        r = still(p)
        if r is not None:
            prog, res = p, r
    return prog, res
