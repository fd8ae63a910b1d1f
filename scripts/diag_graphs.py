"""Whether thunder's CUDA graphs replay in benchmarks/fusion.py's training step (its Llama, bf16, SDPA), and why not.

    python scripts/diag_graphs.py [tiny|gpu]      # on a machine with a GPU; default tiny

Runs five steps with ``thunder.CUDAGraphTransform()``, with cuDNN's attention and without, and prints each graph's
replays, calls run as usual and capture failure; at the first refusals because an output is still in use, every
tensor on that output's memory (shape, dtype, view or not, grad_fn, whether a graph holds it, what refers to it).
"""
import gc, sys, warnings, torch
sys.path.insert(0, '.')
import thunder
import thunder.executors.cudagraphex as cg
from benchmarks.bench_models import WORKLOADS

warnings.simplefilter("ignore")
orig = cg._Graph.why_not_replay
seen = [0]


def why(self, args):
    r = orig(self, args)
    if r and seen[0] < 2 and "still in use" in r:
        seen[0] += 1
        for ptr, t in self.tracked:
            if cg.storage_uses(t) != cg._HELD[ptr] + cg.LONE_STORAGE_USES - 1:
                def p(o):
                    try:
                        return o.untyped_storage().data_ptr()
                    except Exception:
                        return None
                idx = [k for k, o in enumerate(self.outputs) if p(o) == ptr]
                print("REFUSED", r, "outputs at", idx, [tuple(self.outputs[k].shape) for k in idx], flush=True)
                for o in gc.get_objects():
                    if isinstance(o, torch.Tensor) and p(o) == ptr:
                        print("   sharing:", tuple(o.shape), o.dtype, "base" if o._base is not None else "", "rg" if o.requires_grad else "",
                              type(o.grad_fn).__name__ if o.grad_fn is not None else "", "is graph output" if any(o is x for x in self.outputs) else "",
                              [type(x).__name__ for x in gc.get_referrers(o)][:6], flush=True)
                break
    return r


cg._Graph.why_not_replay = why


def run(label):
    seen[0] = 0
    w = WORKLOADS["llama"](sys.argv[1] if len(sys.argv) > 1 else "tiny", "sdpa")
    torch.manual_seed(0)
    m = w.make_model().to("cuda", torch.bfloat16)
    jm = thunder.jit(m, transforms=[thunder.CUDAGraphTransform()])
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    idx = torch.randint(0, w.vocab_size, (w.batch, w.seq), device="cuda")
    for _ in range(5):
        loss = jm(idx, idx); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    segs = []
    for t in [thunder.last_traces(jm)[-1]] + thunder.last_backward_traces(jm)[-1:]:
        segs += [b for b in t.bound_symbols if isinstance(getattr(b.sym, "impl", None), cg._GraphedSegment)]
    print(label, [(b.sym.name, b.sym.impl.replays, b.sym.impl.fallbacks, b.sym.impl.failed) for b in segs], flush=True)
    if label == "cudnn":
        f = thunder.last_traces(jm)[-1]
        g0 = next(b for b in f.bound_symbols if b.sym.name == "CUDAGraph0")
        print("forward CUDAGraph0 outputs:", [(o.name, tuple(o.shape)) for o in g0.flat_outs])


run("cudnn")
torch.backends.cuda.enable_cudnn_sdp(False)
run("no-cudnn-sdpa")
