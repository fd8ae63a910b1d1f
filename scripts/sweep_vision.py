"""Sweeps vision model libraries against eager: every timm model family (the smallest model of each of timm's
modules) or every torchvision model builder (classification, segmentation, video, optical flow) gets a small
random input, one training step (forward, loss, backward) eagerly and under thunder.jit, then one forward in eval
mode, and a verdict: BITWISE, CLOSE (within 1e-4 relative, gradients 1e-3), WRONG, ERROR (thunder raised),
EAGERFAIL (eager raised: an input this sweep cannot make), TIMEOUT. Outputs, parameter gradients and buffers
(BatchNorm's running statistics) are compared.

    python scripts/sweep_vision.py timm                       # the smallest model of each timm module
    python scripts/sweep_vision.py timm resnet18,vit_tiny_patch16_224
    python scripts/sweep_vision.py timm --up-to 15e6          # every timm model of at most 15M parameters
    python scripts/sweep_vision.py torchvision                # every torchvision builder
    python scripts/sweep_vision.py torchvision alexnet,raft_small
    python scripts/sweep_vision.py timm --autocast             # the forward under CPU bfloat16 autocast
    python scripts/sweep_vision.py timm --fused                # executors=["inductor", "torch"]: CLOSE is the
                                                               # expected verdict, WRONG ones are rechecked in float64
                                                               # (against eager's, then thunder's run in float64)
    python scripts/sweep_vision.py timm --bf16                 # parameters, buffers and inputs in bfloat16
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import pathlib
import resource
import sys
import warnings

import torch
from torch.utils import _pytree as pytree

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

import thunder  # noqa: E402
from tests.libraries import import_torchvision  # noqa: E402
from tests.metadata_check import CheckMetadata  # noqa: E402
from scripts._sweep import as_close_as_eager, bit_for_bit, first_that_runs, sweep  # noqa: E402

SIZE = 64


def _loss(out):
    leaves = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return sum((t.float() * torch.linspace(-1, 1, t.numel()).view(t.shape)).sum() for t in leaves)


AUTOCAST = False  # --autocast: the forward under torch.autocast("cpu", dtype=torch.bfloat16), the backward outside
EXECUTORS = None  # --fused: ["inductor", "torch"]
DTYPE = None  # --bf16: torch.bfloat16, the model's floating-point parameters and buffers and the inputs


def _run(model, inputs, jit: bool, train: bool):
    m = copy.deepcopy(model).train(train)
    f = thunder.jit(m, executors=EXECUTORS, transforms=[CheckMetadata()]) if jit else m  # see there
    torch.manual_seed(5)
    with torch.autocast("cpu", dtype=torch.bfloat16) if AUTOCAST else contextlib.nullcontext():
        out = f(*inputs)
    if train:
        _loss(out).backward()
    outs = [t.detach() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    grads = {n: p.grad for n, p in m.named_parameters() if p.grad is not None}
    buffers = {n: b.detach().clone() for n, b in m.named_buffers()}
    return outs, grads, buffers


def _pairs(run) -> list:
    outs, grads, buffers = run
    return [(f"out{i}", a) for i, a in enumerate(outs)] + [(n, grads[n]) for n in grads] + [(n, buffers[n]) for n in buffers]


def _as_close_to_float64_as_eager(model, inputs, train: bool, eager, jitted) -> bool:
    """Whether every value of thunder's run is eager's or within a few times eager's distance from eager's run in
    float64 (fused kernels round otherwise; a model that amplifies rounding differs from float32 eager by more than
    the sweep's tolerance, yet no more than eager does from exact values)."""
    up = lambda x: x.double() if x.is_floating_point() else x  # noqa: E731
    try:
        ref = _run(copy.deepcopy(model).double(), tuple(up(x) for x in inputs), jit=False, train=train)
    except Exception:  # noqa: BLE001
        return False
    return all(as_close_as_eager(e, t, r) for (_, e), (_, t), (_, r) in zip(_pairs(eager), _pairs(jitted), _pairs(ref)))


def _same_in_float64(model, inputs, train: bool) -> bool:
    """Whether thunder's run in float64 equals eager's in float64 to 1e-9 of each value's scale (the largest of the
    outputs' or of the gradients'): the same computation, whose float32 results differ by rounding sent through a
    discontinuity (a ReLU's input within rounding of zero after a batch norm over a few elements passes one element's
    gradient in one run and not in the other, and every gradient before it differs)."""
    up = lambda x: x.double() if x.is_floating_point() else x  # noqa: E731
    try:
        eager = _pairs(_run(copy.deepcopy(model).double(), tuple(up(x) for x in inputs), jit=False, train=train))
        jitted = _pairs(_run(copy.deepcopy(model).double(), tuple(up(x) for x in inputs), jit=True, train=train))
    except Exception:  # noqa: BLE001
        return False
    floats = [(n, e, t) for (n, e), (_, t) in zip(eager, jitted) if e.is_floating_point()]
    scale = max((e.abs().max().item() for n, e, _ in floats if e.numel() and not n.startswith("out")), default=0.0)
    return all(torch.allclose(t, e, rtol=1e-9, atol=1e-9 * (e.abs().max().item() if n.startswith("out") else scale))
               for n, e, t in floats if e.numel())


def _compare(eager, jitted) -> tuple[str, str]:
    (outs, grads, buffers), (j_outs, j_grads, j_buffers) = eager, jitted
    if len(outs) != len(j_outs) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(outs, j_outs)):
        return "WRONG", "outputs differ in number, shape or dtype"
    if set(grads) != set(j_grads):
        return "WRONG", f"parameters with a gradient differ: {sorted(set(grads) ^ set(j_grads))[:5]}"
    pairs = [(f"out{i}", a, b) for i, (a, b) in enumerate(zip(outs, j_outs))]
    pairs += [(n, grads[n], j_grads[n]) for n in grads] + [(n, buffers[n], j_buffers[n]) for n in buffers]
    differ = [(n, a, b) for n, a, b in pairs if not bit_for_bit(a, b)]
    if not differ:
        return "BITWISE", ""
    close = all(a.shape == b.shape and (not a.is_floating_point() and torch.equal(a, b) or a.is_floating_point()
                                        and torch.allclose(a, b, rtol=1e-3, atol=1e-5, equal_nan=True))
                for _, a, b in differ)
    worst = max(differ, key=lambda d: (d[1].double() - d[2].double()).abs().max().item() if d[1].shape == d[2].shape
                else float("inf"))
    diff = (worst[1].double() - worst[2].double()).abs().max().item() if worst[1].shape == worst[2].shape else "shape"
    return ("CLOSE" if close else "WRONG"), f"{len(differ)} of {len(pairs)} differ, worst {worst[0]} ({diff:.3g})" \
        if not isinstance(diff, str) else f"{worst[0]} shape"


def sweep_one(builds) -> tuple[str, str]:
    """``builds``: ways to make the model and its inputs, tried in turn until eager runs one."""
    def eager(build):
        torch.manual_seed(0)
        model, inputs = build()
        if DTYPE is not None:
            model, inputs = model.to(DTYPE), tuple(x.to(DTYPE) if x.is_floating_point() else x for x in inputs)
        return model, inputs, {train: _run(model, inputs, jit=False, train=train) for train in (True, False)}

    built, failure = first_that_runs(lambda build=build: eager(build) for build in builds)
    if built is None:
        return "EAGERFAIL", failure
    model, inputs, eager = built
    verdicts = []
    for train in (True, False):
        jitted = _run(model, inputs, jit=True, train=train)
        verdict, detail = _compare(eager[train], jitted)
        if verdict == "WRONG" and EXECUTORS and _as_close_to_float64_as_eager(model, inputs, train, eager[train], jitted):
            verdict, detail = "CLOSE", f"as close to float64 as eager: {detail}"
        elif verdict == "WRONG" and EXECUTORS and _same_in_float64(model, inputs, train):
            verdict, detail = "CLOSE", f"equal to eager in float64 (rounding through a discontinuity): {detail}"
        verdicts.append((train, verdict, detail))
    order = ["WRONG", "CLOSE", "BITWISE"]
    verdict = min((v for _, v, _ in verdicts), key=order.index)
    return verdict, "; ".join(f"{'train' if t else 'eval'}: {d}" for t, v, d in verdicts if v != "BITWISE")


def _timm_cases(names, up_to):
    import timm

    if not names:
        names = []
        for module in timm.list_modules():
            sizes = []
            for name in timm.list_models(module=module):
                try:
                    with torch.device("meta"):
                        m = timm.create_model(name, pretrained=False)
                    sizes.append((sum(p.numel() for p in m.parameters()), name))
                except Exception:  # noqa: BLE001
                    continue
            if sizes:
                names += [min(sizes)[1]] if up_to is None else sorted(n for size, n in sizes if size <= up_to)
    for name in names:
        yield name, [lambda name=name: _timm_build(timm, name, small=True), lambda name=name: _timm_build(timm, name)]


def _timm_build(timm, name, small=False):
    """The model and an image: of SIZE (``small``: where the model takes an image size, or has no fixed one), else
    of the size it was made for."""
    model = None
    if small:
        try:
            model = timm.create_model(name, pretrained=False, num_classes=10, img_size=SIZE)
        except TypeError:
            pass
    if model is None:
        model = timm.create_model(name, pretrained=False, num_classes=10)
        cfg = getattr(model, "pretrained_cfg", None) or {}
        if small and cfg.get("fixed_input_size", False):
            raise ValueError("fixed input size")
    size = SIZE if small else (getattr(model, "pretrained_cfg", None) or {}).get("input_size", (3, 224, 224))[-1]
    return model, (torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1)),)


_TV_INPUTS = {
    "classification": lambda: (torch.randn(2, 3, SIZE, SIZE),),
    "segmentation": lambda: (torch.randn(2, 3, SIZE, SIZE),),
    "video": lambda: (torch.randn(2, 3, 16, SIZE, SIZE),),
    "optical_flow": lambda: (torch.randn(1, 3, 128, 128), torch.randn(1, 3, 128, 128)),
}
_TV_SIZES = {"inception_v3": 299, "googlenet": 96, "vit": 224, "maxvit": 224, "swin3d": SIZE, "mvit": 224,
             "s3d": 224, "r3d": SIZE}


def _torchvision_cases(names):
    tv = import_torchvision()
    from torchvision import models

    builders = {}
    for kind, module in (("classification", models), ("segmentation", models.segmentation),
                         ("video", models.video), ("optical_flow", models.optical_flow)):
        for name in models.list_models(module=module):
            builders[name] = kind
    for name in names or sorted(builders):
        kind = builders[name]
        kwargs = {"num_classes": 10} if kind in ("classification", "segmentation", "video") else {}
        if kind == "segmentation":
            kwargs.update(weights_backbone=None)
        if name in ("googlenet", "inception_v3"):
            kwargs.update(init_weights=True)

        def inputs(name=name, kind=kind):
            torch.manual_seed(1)
            size = next((s for k, s in _TV_SIZES.items() if name.startswith(k)), None)
            xs = _TV_INPUTS[kind]()
            if size is not None and kind != "optical_flow":
                xs = tuple(torch.randn(*x.shape[:-2], size, size) for x in xs)
            return xs
        yield name, [lambda name=name, kwargs=kwargs, inputs=inputs: (tv.models.get_model(name, weights=None, **kwargs),
                                                                      inputs())]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("library", choices=("timm", "torchvision"))
    parser.add_argument("names", nargs="?", help="comma-separated model names (default: all, see above)")
    parser.add_argument("--up-to", type=float, help="timm: every model of at most this many parameters")
    parser.add_argument("--autocast", action="store_true", help="the forward under CPU bfloat16 autocast")
    parser.add_argument("--fused", action="store_true", help='thunder.jit(executors=["inductor", "torch"])')
    parser.add_argument("--bf16", action="store_true", help="parameters, buffers and inputs in bfloat16")
    args = parser.parse_args(argv[1:])
    global AUTOCAST, EXECUTORS, DTYPE
    AUTOCAST = args.autocast
    DTYPE = torch.bfloat16 if args.bf16 else None
    EXECUTORS = ["inductor", "torch"] if args.fused else None
    library, names = args.library, args.names.split(",") if args.names else None
    torch.set_num_threads(1)
    resource.setrlimit(resource.RLIMIT_AS, (12 * 2**30, 12 * 2**30))  # fail, not swap
    if library == "timm":
        import_torchvision()  # timm imports it
    cases = _timm_cases(names, args.up_to) if library == "timm" else _torchvision_cases(names)
    sweep(((name, lambda builds=builds: sweep_one(builds)) for name, builds in cases), 300, 32)


if __name__ == "__main__":
    main(sys.argv)
