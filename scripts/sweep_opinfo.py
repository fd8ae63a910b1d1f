"""Sweeps torch's own OpInfo database (``torch.testing._internal.common_methods_invocations.op_db``, about 680
operators with sample inputs written by PyTorch's developers) against eager: each operator's first CPU samples
(float32 unless ``--dtype``) run eagerly and under thunder.jit, and a verdict per operator: OK (bit for bit,
layouts included), WRONG (another value, dtype, shape or layout), ERROR (thunder raised where eager did not),
REFUSED (thunder's NotImplementedError). Random operators are compared by metadata only; most are REFUSED, as
OpInfo calls them inside ``freeze_rng_state`` (``torch.get_rng_state``, refused while tracing). It needs
``expecttest``, which torch's testing package imports (``pip install expecttest``; not a dependency of thunder).

    python scripts/sweep_opinfo.py                  # forward
    python scripts/sweep_opinfo.py --grad           # forward and gradients (samples that require grad)
    python scripts/sweep_opinfo.py --fused          # executors=["inductor", "torch"], within float tolerance
    python scripts/sweep_opinfo.py var std --grad   # some operators (OpInfo names, variants as name.variant)
    python scripts/sweep_opinfo.py --dtype bfloat16 # samples of another dtype (float64, int64, bool, ...)
    python scripts/sweep_opinfo.py --variant inplace  # x.add_(y) (the input's new value compared too); or method
"""
from __future__ import annotations

import argparse
import itertools
import pathlib
import sys
import time
import warnings

import torch
from torch.utils import _pytree as pytree

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

import thunder  # noqa: E402

# operators whose values are random or uninitialized: their metadata alone is compared
_UNVALUED = ("bernoulli", "normal", "rand", "randn", "randint", "multinomial", "uniform", "dropout", "rrelu",
             "cauchy", "exponential", "geometric", "log_normal", "empty")


# fused kernels round otherwise than eager's: a few ulps of the dtype
_FUSED_TOLERANCE = {torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (2e-3, 1e-3), torch.float64: (1e-7, 1e-7)}


def difference(e, a, fused: bool) -> str | None:
    """How thunder's results ``a`` differ from eager's ``e``, or None."""
    le, la = pytree.tree_leaves(e), pytree.tree_leaves(a)
    if len(le) != len(la):
        return f"{len(le)} results, thunder {len(la)}"
    for i, (x, y) in enumerate(zip(le, la)):
        if not isinstance(x, torch.Tensor):
            if x != y and not (isinstance(x, float) and x != x and y != y):
                return f"result {i}: {x!r}, thunder {y!r}"
            continue
        if not isinstance(y, torch.Tensor):
            return f"result {i}: a tensor, thunder {y!r}"
        if x.dtype != y.dtype or x.shape != y.shape:
            return f"result {i}: {x.dtype}{tuple(x.shape)}, thunder {y.dtype}{tuple(y.shape)}"
        if x.dtype == torch.complex32:  # (no comparison kernels)
            x, y = x.to(torch.complex64), y.to(torch.complex64)
        if fused:
            rtol, atol = _FUSED_TOLERANCE.get(x.dtype, (1e-4, 1e-5))
            if not torch.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
                largest = (x.double() - y.double()).abs().nan_to_num().max()
                return f"result {i}: values (largest difference {largest:.3g})"
            continue
        if not torch.equal(x, y) and not torch.allclose(x, y, rtol=0, atol=0, equal_nan=True):
            return f"result {i}: values"
        if x.numel() > 1 and x.stride() != y.stride():
            return f"result {i}: strides {x.stride()}, thunder {y.stride()}"
    return None


def _copy(sample):
    return pytree.tree_map(lambda t: t.detach().clone().requires_grad_(t.requires_grad)
                           if isinstance(t, torch.Tensor) else t, sample)


def _gradients(out, inputs):
    outs = [t for t in pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
    ins = [t for t in pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs or not ins:
        return None
    grads = torch.autograd.grad(outs, ins, [torch.full_like(t, 0.5) for t in outs], allow_unused=True)
    return [g if g is not None else "no gradient" for g in grads]


def _callable(op, variant: str):
    """The operator as called: ``op.op(x, ...)``, ``x.op(...)`` or ``x.op_(...)``; an in-place variant returns the
    input too, so that its new value is compared."""
    if variant == "op":
        return op.op
    if variant == "method":
        return op.method_variant
    inplace = op.inplace_variant

    def fn(inp, *a, **kw):
        return inplace(inp, *a, **kw), inp
    return fn


def check(op, args) -> tuple[str, str, int]:
    """(verdict, detail, samples compared) of one operator."""
    dtype = getattr(torch, args.dtype)
    samples = list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=args.grad), args.samples))
    unvalued = any(w in op.name for w in _UNVALUED)
    called = _callable(op, args.variant)
    compared = 0
    for k, s in enumerate(samples):
        def fn(inp, *a, **kw):
            return called(inp, *a, **kw)

        eager_in, thunder_in = _copy((s.input, s.args, s.kwargs)), _copy((s.input, s.args, s.kwargs))
        try:
            torch.manual_seed(0)
            expected = fn(eager_in[0], *eager_in[1], **eager_in[2])
            expected_grads = _gradients(expected, eager_in) if args.grad and not unvalued else None
        except Exception:  # noqa: BLE001 - a sample eager rejects
            continue
        jfn = thunder.jit(fn, executors=["inductor", "torch"]) if args.fused else thunder.jit(fn)
        try:
            torch.manual_seed(0)
            actual = jfn(thunder_in[0], *thunder_in[1], **thunder_in[2])
            grads = _gradients(actual, thunder_in) if expected_grads is not None else None
        except NotImplementedError as e:
            return "REFUSED", f"sample {k}: {str(e)[:150]}", compared
        except Exception as e:  # noqa: BLE001
            return "ERROR", f"sample {k}: {type(e).__name__}: {str(e)[:200]}", compared
        compared += 1
        if unvalued:
            expected, actual = (pytree.tree_map(lambda t: t.shape if isinstance(t, torch.Tensor) else t, x)
                                for x in (expected, actual))
        found = difference(expected, actual, args.fused)
        if found is None and expected_grads is not None:
            found = difference(expected_grads, grads, args.fused)
            found = found and "gradient " + found
        if found is not None:
            return "WRONG", f"sample {k}: {found}", compared
    return "OK", "", compared


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="OpInfo names (name.variant); all where none")
    ap.add_argument("--grad", action="store_true", help="samples that require grad: gradients compared too")
    ap.add_argument("--fused", action="store_true", help="executors=['inductor', 'torch'], within float tolerance")
    ap.add_argument("--samples", type=int, default=6, help="samples per operator (the first ones)")
    ap.add_argument("--dtype", default="float32", help="the samples' dtype (a torch attribute name)")
    ap.add_argument("--variant", choices=("op", "method", "inplace"), default="op",
                    help="torch.op(x, ...), x.op(...) or x.op_(...) (no gradients)")
    args = ap.parse_args()
    if args.variant == "inplace" and args.grad:
        ap.error("--variant inplace compares values only (an in-place update of a leaf has no gradient)")
    from torch.testing._internal.common_methods_invocations import op_db

    torch.set_num_threads(1)
    counts: dict[str, int] = {}
    for op in op_db:
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if (args.names and name not in args.names) or getattr(torch, args.dtype) not in op.supported_dtypes("cpu"):
            continue
        if (args.variant == "method" and op.method_variant is None) or \
                (args.variant == "inplace" and op.inplace_variant is None):
            continue
        if args.grad and not op.supports_autograd:
            continue
        start = time.perf_counter()
        verdict, detail, compared = check(op, args)
        counts[verdict] = counts.get(verdict, 0) + 1
        print(f"{name:44s} {verdict:8s} {compared} compared {time.perf_counter() - start:6.1f}s {detail}", flush=True)
    print(", ".join(f"{k}={v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
