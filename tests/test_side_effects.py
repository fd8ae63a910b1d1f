"""Python side effects of traced programs, the random state, and tracing from several threads."""
from __future__ import annotations

import dataclasses
import random
import threading
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from thunder.driver.frontend import ThunderSharpEdgeError

LOG: list = []


def test_manual_seed_inside_the_program_reseeds_on_every_call():
    def f(x):
        torch.manual_seed(7)
        return F.dropout(x, 0.5) + torch.rand(x.shape)

    jf = thunder.jit(f)
    x = torch.ones(16)
    for seed in (1, 2, 3):
        torch.manual_seed(seed)
        expected = f(x)
        after_eager = torch.rand(2)
        torch.manual_seed(seed)
        assert torch.equal(jf(x), expected)
        assert torch.equal(torch.rand(2), after_eager)  # the RNG is left where eager leaves it
    assert "manual_seed(7)" in str(thunder.last_traces(jf)[-1])


def test_manual_seed_in_training():
    lin = nn.Linear(4, 4)

    def f(x):
        torch.manual_seed(0)
        return F.dropout(lin(x), 0.3).sum()

    x = torch.randn(3, 4)
    jf = thunder.jit(f)
    out = jf(x)
    out.backward()
    g = lin.weight.grad.clone()
    lin.weight.grad = None
    f(x).backward()
    assert torch.equal(g, lin.weight.grad)


def _forked_random(x):
    with torch.random.fork_rng():
        noise = torch.rand(x.shape)
    return x + noise + torch.rand(x.shape)  # eager: the same numbers twice


def _state_saved_and_restored(x):
    state = torch.get_rng_state()
    noise = torch.rand(x.shape)
    torch.set_rng_state(state)
    return x + noise - torch.rand(x.shape)  # eager: zeros


def _reseeded_by_torch_seed(x):
    torch.seed()
    return x + torch.rand(x.shape)


@pytest.mark.parametrize("fn,match", [(_forked_random, "torch.get_rng_state"),
                                      (_state_saved_and_restored, "torch.get_rng_state"),
                                      (_reseeded_by_torch_seed, "torch.seed")],
                         ids=lambda v: getattr(v, "__name__", ""))
def test_the_random_state_read_or_set_inside_the_program_is_refused(fn, match):
    """The generator's state read or set by the program (``fork_rng``, ``get_rng_state``/``set_rng_state``,
    ``torch.seed``) would act on the tracing call alone: ``fork_rng``'s block and the numbers after it came out
    different, where eager's are the same (a wrong result). Refused, the state untouched."""
    x = torch.zeros(4)
    torch.manual_seed(0)
    expected_next = torch.rand(3)
    torch.manual_seed(0)
    with pytest.raises(NotImplementedError, match=match):
        thunder.jit(fn)(x)
    assert torch.equal(torch.rand(3), expected_next)
    fn(x)  # outside a jitted function, torch's own


def _ones_in_float64(x):
    torch.set_default_dtype(torch.float64)
    try:
        return torch.ones(x.shape) + x  # eager: float64
    finally:
        torch.set_default_dtype(torch.float32)


def _denormals_flushed(x):
    torch.set_flush_denormal(True)
    try:
        return x * 1e-39  # eager: zeros
    finally:
        torch.set_flush_denormal(False)


def _products_in_tf32(x):
    torch.set_float32_matmul_precision("high")
    try:
        return x @ x.t()
    finally:
        torch.set_float32_matmul_precision("highest")


def _default_dtype_set_as_it_is(x):
    torch.set_default_dtype(torch.float32)
    return torch.ones(x.shape) + x


@pytest.mark.parametrize("fn,match", [(_ones_in_float64, "torch.set_default_dtype"),
                                      (_denormals_flushed, "torch.set_flush_denormal"),
                                      (_products_in_tf32, "torch.set_float32_matmul_precision")],
                         ids=lambda v: getattr(v, "__name__", ""))
def test_process_wide_settings_changed_inside_the_program_are_refused(fn, match):
    """A setting changed by the program would hold while tracing, not when the trace runs: ``torch.ones`` between
    ``set_default_dtype(float64)`` and ``set_default_dtype(float32)`` came out float32, denormals were not flushed
    (wrong results). Refused; setting the default dtype it is changes nothing and is accepted."""
    x = torch.ones(3)
    with pytest.raises(NotImplementedError, match=match):
        thunder.jit(fn)(x)
    assert torch.get_default_dtype() is torch.float32
    expected = fn(x)
    assert expected.dtype is torch.float64 or fn is _products_in_tf32 or torch.equal(expected, torch.zeros(3))
    assert torch.equal(thunder.jit(_default_dtype_set_as_it_is)(x), _default_dtype_set_as_it_is(x))


@pytest.mark.parametrize("mode", ["warn", "error"])
def test_python_side_effects_are_reported(mode):
    def f(x):
        print("tracing")
        LOG.append(1)
        return x * random.random()

    if mode == "warn":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            thunder.jit(f, sharp_edges="warn")(torch.randn(2))
        messages = [str(w.message) for w in caught if "Sharp edge" in str(w.message)]
        assert any("print()" in m for m in messages)
        assert any("'LOG'" in m for m in messages)
        assert any("random" in m for m in messages)
    else:
        with pytest.raises(ThunderSharpEdgeError, match="print"):
            thunder.jit(f, sharp_edges="error")(torch.randn(2))


def test_library_internals_are_not_reported():
    m = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.LayerNorm(4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            thunder.jit(m, sharp_edges="warn")(torch.randn(2, 4))
    assert not [w for w in caught if "Sharp edge" in str(w.message)]


def _programs():
    return [
        (lambda x: (x * 2).sin(), (3, 4)),
        (lambda x: x.relu() + x.t().t(), (5, 2)),
        (lambda x: torch.softmax(x, -1) @ x.t(), (4, 4)),
        (lambda x: x.cumsum(0).exp(), (6,)),
    ]


def test_tracing_from_several_threads():
    """Each thread jits and runs its own programs while the others trace: traces never mix."""
    programs = _programs()
    barrier = threading.Barrier(len(programs))
    errors = []

    def work(fn, shape):
        try:
            x = torch.randn(shape)
            barrier.wait()
            for _ in range(5):
                jfn = thunder.jit(fn, cache="no caching")
                out = jfn(x)
                if not torch.allclose(out, fn(x)):
                    errors.append(f"wrong result for {shape}")
        except Exception as e:  # noqa: BLE001 - collected and reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=p) for p in programs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_one_jitted_function_called_from_several_threads():
    def f(x):
        return (x * 3).tanh()

    jf = thunder.jit(f)
    shapes = [(2,), (3,), (2, 2), (4,)] * 3
    barrier = threading.Barrier(len(shapes))
    errors = []

    def work(shape):
        x = torch.randn(shape)
        barrier.wait()
        for _ in range(3):
            if not torch.equal(jf(x), f(x)):
                errors.append(shape)

    threads = [threading.Thread(target=work, args=(s,)) for s in shapes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_eager_code_in_another_thread_is_unaffected_by_tracing():
    """The hooks thunder installs (checkpoint, autograd.Function, manual_seed) act only in the tracing thread."""
    started, done = threading.Event(), threading.Event()
    results = {}

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    def slow(x):
        started.set()
        done.wait(5)
        return x + 1

    def eager():
        started.wait(5)
        torch.manual_seed(3)
        a = torch.rand(3)
        torch.manual_seed(3)
        results["seed"] = torch.equal(a, torch.rand(3))
        x = torch.randn(3, requires_grad=True)
        Double.apply(x).sum().backward()
        results["function"] = torch.equal(x.grad, torch.full((3,), 2.0))
        done.set()

    t = threading.Thread(target=eager)
    t.start()
    thunder.jit(slow)(torch.randn(3))
    t.join()
    assert results == {"seed": True, "function": True}


class RunningAverage(nn.Module):
    """Replaces its buffer with a new tensor in forward (out of place), as some code bases do."""

    def __init__(self):
        super().__init__()
        self.register_buffer("avg", torch.zeros(3))
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        self.avg = self.avg * 0.9 + x.mean(0) * 0.1
        return self.lin(x) + self.avg


def test_a_buffer_replaced_in_forward_gets_the_new_value_on_every_call():
    m, ref = RunningAverage(), RunningAverage()
    ref.load_state_dict(m.state_dict())
    jm = thunder.jit(m)
    for _ in range(3):
        x = torch.randn(4, 3)
        assert torch.equal(jm(x), ref(x))
        assert torch.equal(m.avg, ref.avg)


class PositionsForLength(nn.Module):
    """Replaces its buffer by one of another shape when the input's length changes (timm's ConViT: at its first
    call)."""

    def __init__(self, by_grad):
        super().__init__()
        self.register_buffer("positions", torch.zeros(1), persistent=False)
        self.lin = nn.Linear(4, 4)
        self.by_grad = by_grad

    def forward(self, x):
        if self.positions.shape[0] != x.shape[0]:
            self.positions = torch.arange(x.shape[0]).float() * (self.lin.bias.sum() if self.by_grad else 1.0)
        return self.lin(x) + self.positions[:, None]


@pytest.mark.parametrize("by_grad", [False, True], ids=["constant", "computed from a parameter"])
def test_a_buffer_replaced_by_another_shape_is_the_new_tensor_after_the_call(by_grad):
    m, ref = PositionsForLength(by_grad), PositionsForLength(by_grad)
    ref.load_state_dict(m.state_dict())
    jm = thunder.jit(m)
    for n, (length, misses) in enumerate([(3, 1), (3, 2), (3, 2), (5, 3), (5, 4), (5, 4)]):
        x = torch.randn(length, 4)
        assert torch.equal(jm(x), ref(x)), n
        assert torch.equal(m.positions, ref.positions) and m.positions.shape == (length,), n
        assert "positions" in m._buffers and "positions" not in m.state_dict()  # still a non-persistent buffer
        # a call that replaced it compiled for the old shape; the next one compiles for the new, then hits the cache
        assert thunder.cache_misses(jm) == misses, n


def test_a_parameter_replaced_in_forward_is_refused():
    class Replaces(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))

        def forward(self, x):
            y = x * self.w
            self.w = None
            return y

    with pytest.raises(NotImplementedError, match="replaces the parameter 'w' with None"):
        thunder.jit(Replaces())(torch.ones(2))


class CachedBias(nn.Module):
    """Computes a buffer at its first call and keeps it (x-transformers' ALiBi bias): registered as None first,
    not registered at all, or registered None and assigned."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.lin = nn.Linear(4, 4)
        if how != "registered in forward":
            self.register_buffer("bias", None, persistent=False)

    def forward(self, x):
        bias = getattr(self, "bias", None)
        if bias is None or bias.shape[0] < x.shape[0]:
            bias = torch.arange(x.shape[0]).float()[:, None] * self.lin.weight[0].detach()
            if self.how == "assigned":
                self.bias = bias
            else:
                self.register_buffer("bias", bias, persistent=self.how == "registered in forward")
        return self.lin(x) + self.bias[: x.shape[0]]


@pytest.mark.parametrize("how", ["registered None, then registered", "registered in forward", "assigned"])
def test_a_buffer_the_program_registers_is_its_tensor_after_the_call(how):
    m, ref = CachedBias(how), CachedBias(how)
    ref.load_state_dict(m.state_dict())
    jm = thunder.jit(m)
    for n, length in enumerate([3, 3, 2, 5, 5]):
        x = torch.randn(length, 4)
        assert torch.equal(jm(x), ref(x)), n
        assert type(m.bias) is torch.Tensor and torch.equal(m.bias, ref.bias), n
        assert list(m._buffers) == list(ref._buffers) and m.state_dict().keys() == ref.state_dict().keys(), n


def test_a_parameter_registered_in_forward_is_refused_and_leaves_no_traced_tensor():
    class RegistersParameter(nn.Module):  # (a parameter made in forward is refused before: requires_grad_)
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))

        def forward(self, x):
            self.register_buffer("scratch", x * 2)
            self.register_parameter("alias", self.w)
            return x * self.alias

    m = RegistersParameter()
    with pytest.raises(NotImplementedError, match="registers the parameter 'alias' of module while thunder traces"):
        thunder.jit(m)(torch.ones(2))
    assert list(m._buffers) == [] and list(m._parameters) == ["w"] and type(m.w) is nn.Parameter


HISTORY: list = []
TABLE: dict = {}


# ---------------------------------------------------------------------------------------------
# Tensors stored in Python state: stored again after every call (see [Note: state writes])
# ---------------------------------------------------------------------------------------------


class Holder:
    pass


class Stores(nn.Module):
    """Stores tensors in Python state in one of several ways (``where``); ``state()`` is what it stored."""

    def __init__(self, where):
        super().__init__()
        self.where = where
        self.lin = nn.Linear(2, 2)
        self.history, self.table = [], {}
        self.count = torch.zeros(2)

    def forward(self, x, holder=None):
        y = self.lin(x)
        w = self.where
        if w == "module attribute, computed":
            self.cache = y * 2
        elif w == "module attribute, the argument":  # was kept from the first call: a silently stale value
            self.last = x
        elif w == "module attribute, a view of the argument":
            self.last = x[0]
        elif w == "module attribute, read and replaced":  # the same shape on every call: one trace
            self.count = self.count + x.sum(0)
        elif w == "module attribute, a tuple and a dict":
            self.pair = (y, "label", {"x": x, "n": 3})
        elif w == "module attribute, updated in place after":
            self.cache = y * 1
            self.cache.add_(1)
        elif w == "argument object":
            holder.t = y + 1
        elif w == "argument object, twice":
            holder.t = y + 1
            holder.t = holder.t * 3
        elif w == "argument object, a new object":  # (Hugging Face's DynamicCache adds a new layer object so)
            holder.obj = Holder()
            holder.obj.t = y
            holder.obj.name = "new"
        elif w == "module list":
            self.history.append(y)
        elif w == "module dict":  # a cache filled on the first call (timm's and HF's LeViT in eval mode)
            key = str(x.device)
            if key not in self.table:
                self.table[key] = self.lin.weight[:, :1].detach() * 2
            y = y + self.table[key].T
        elif w == "global list":
            HISTORY.append(y)
        elif w == "global dict, nested":
            TABLE["last"] = [y, "label"]
        return y + 1

    def state(self, holder):
        return {"module attribute, computed": lambda: self.cache, "module attribute, the argument": lambda: self.last,
                "module attribute, a view of the argument": lambda: self.last,
                "module attribute, read and replaced": lambda: self.count,
                "module attribute, a tuple and a dict": lambda: self.pair,
                "module attribute, updated in place after": lambda: self.cache,
                "argument object": lambda: holder.t, "argument object, twice": lambda: holder.t,
                "argument object, a new object": lambda: (type(holder.obj), vars(holder.obj)),
                "module list": lambda: self.history, "module dict": lambda: self.table,
                "global list": lambda: list(HISTORY), "global dict, nested": lambda: dict(TABLE)}[self.where]()


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.shape == b.shape and a.requires_grad == b.requires_grad
                and torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("train", [False, True], ids=["no_grad", "train"])
@pytest.mark.parametrize("where", ["module attribute, computed", "module attribute, the argument",
                                   "module attribute, a view of the argument", "module attribute, read and replaced",
                                   "module attribute, a tuple and a dict", "module attribute, updated in place after",
                                   "argument object", "argument object, twice", "argument object, a new object",
                                   "module list", "module dict",
                                   "global list", "global dict, nested"])
def test_tensors_stored_in_python_state_are_stored_after_every_call_as_in_eager(where, train):
    """What the program stores (on a module, on an argument object, in a list or dict it reads) is, after every call,
    what eager stores: that call's tensors. Before, a computed tensor was refused, and an argument tensor stored on
    the first call stayed there on later calls, a silently stale value."""
    torch.manual_seed(0)
    m, ref = Stores(where), Stores(where)
    ref.load_state_dict(m.state_dict())
    jm = thunder.jit(m)
    holder, ref_holder = Holder(), Holder()
    grad = torch.enable_grad if train else torch.no_grad
    HISTORY.clear(), TABLE.clear()
    for i in range(3):
        x = torch.randn(3, 2)
        with grad():
            expected = ref(x, ref_holder)
        expected_state, eager_globals = ref.state(ref_holder), (list(HISTORY), dict(TABLE))
        HISTORY[:] = HISTORY[:-1]  # as before the eager call
        with grad():
            actual = jm(x, holder)
        assert torch.equal(actual, expected), i
        assert _same(m.state(holder), expected_state), (i, m.state(holder), expected_state)
        assert _same((list(HISTORY), dict(TABLE)), eager_globals)
        if where == "module attribute, the argument":
            assert m.last is x  # the very tensor, as in eager
        if train:
            expected.sum().backward(), actual.sum().backward()
            assert torch.equal(m.lin.weight.grad, ref.lin.weight.grad)
    if where in ("module attribute, read and replaced", "argument object", "module attribute, computed"):
        assert thunder.cache_misses(jm) == 1 and thunder.cache_hits(jm) == 2
    HISTORY.clear(), TABLE.clear()


def test_a_stored_tensor_that_requires_grad_is_differentiable_after_every_call():
    """A hidden state kept on the module in training (``self.cache = ...``) is part of the autograd graph, as in
    eager: a loss of it gives the module's parameters their gradients."""
    torch.manual_seed(0)
    m, ref = Stores("module attribute, computed"), Stores("module attribute, computed")
    ref.load_state_dict(m.state_dict())
    jm = thunder.jit(m)
    for _ in range(2):
        x = torch.randn(3, 2)
        (jm(x).sum() + m.cache.pow(2).sum()).backward()
        (ref(x).sum() + ref.cache.pow(2).sum()).backward()
        assert m.cache.requires_grad and torch.equal(m.cache, ref.cache)
        assert torch.equal(m.lin.weight.grad, ref.lin.weight.grad) and torch.equal(m.lin.bias.grad, ref.lin.bias.grad)


def test_a_stored_tensor_goes_to_the_object_of_each_call():
    def f(x, holder):
        holder.t = x * 2
        return x + 1

    jf = thunder.jit(f)
    a, b = Holder(), Holder()
    for holder, x in [(a, torch.ones(2)), (b, torch.full((2,), 2.0)), (a, torch.full((2,), 3.0))]:
        jf(x, holder)
        assert torch.equal(holder.t, x * 2)
    assert torch.equal(b.t, torch.full((2,), 4.0))


def test_a_list_replaced_between_calls_gets_the_stored_tensor():
    m = Stores("module list")
    jm = thunder.jit(m)
    with torch.no_grad():
        jm(torch.randn(3, 2))
        old = m.history
        m.history = []
        y = jm(torch.randn(3, 2))
    assert len(old) == 1 and len(m.history) == 1 and torch.equal(m.history[0] + 1, y)


@dataclasses.dataclass
class Box:
    t: object


class StoresUnsupported(nn.Module):
    def __init__(self, where):
        super().__init__()
        self.where = where
        self.seen = set()

    def forward(self, x, holder=None):
        y = x * 2
        if self.where == "module set":
            self.seen.add(y)
        elif self.where == "a dataclass holding a tensor":
            holder.obj = Box(y)
        return y + 1


@pytest.mark.parametrize("where,label,state", [
    ("module set", r"module.seen \(a set\)", lambda m, h: m.seen),
    ("a dataclass holding a tensor", r"the argument holder.obj", lambda m, h: getattr(h, "obj", None)),
])
def test_storing_a_computed_tensor_where_it_cannot_be_stored_again_is_refused_and_undone(where, label, state):
    m, h = StoresUnsupported(where), Holder()
    with pytest.raises(NotImplementedError, match="stores a tensor it computes in " + label):
        thunder.jit(m)(torch.randn(2, 2), h)
    assert not state(m, h)  # no traced value left behind


class WritesPython(nn.Module):
    """Python values the program stores: a counter it reads, a number it assigns, a list and a set it fills."""

    def __init__(self):
        super().__init__()
        self.calls, self.shapes, self.seen = 0, [], set()

    def forward(self, x):
        self.calls += 1
        self.last_batch = x.shape[0]
        self.shapes.append(tuple(x.shape))
        self.seen.add(x.shape[0])
        return x * 2

    def state(self):
        return self.calls, self.last_batch, list(self.shapes), set(self.seen)


def test_python_values_stored_by_the_program_are_stored_after_every_call_as_in_eager():
    """A call that runs an earlier compilation (here after the state was reset, or with an earlier batch size) stores
    what eager stores. Before, only the call that traced did, so a counter reset to 0 stayed at 0, and ``last_batch``
    kept the previous call's batch size: silently stale state."""
    m, ref = WritesPython(), WritesPython()
    jm = thunder.jit(m)
    for step, batch in enumerate([2, 3, 2, 2, 3]):
        if step == 3:
            for model in (m, ref):
                model.calls = 0
                model.shapes.clear(), model.seen.clear()
        x = torch.randn(batch, 2)
        assert torch.equal(jm(x), ref(x))
        assert m.state() == ref.state(), step
    assert thunder.cache_hits(jm) == 2  # after the reset, the first and second calls' compilations run again


def test_a_number_stored_with_symbolic_values_is_each_calls():
    class Holds:
        pass

    def f(x, n, h):
        h.n = n + 1
        return x * n

    jf, h = thunder.jit(f, cache="symbolic values"), Holds()
    for n in (2, 5, 7):
        assert torch.equal(jf(torch.ones(2), n, h), torch.full((2,), float(n)))
        assert h.n == n + 1
    assert thunder.cache_misses(jf) == 1


def test_a_list_given_only_the_programs_inputs_holds_each_calls_tensors():
    history = []

    def f(x):
        history.append(x)
        return x + 1

    jf = thunder.jit(f)
    xs = [torch.randn(2) for _ in range(3)]
    for i, x in enumerate(xs):
        assert torch.equal(jf(x), x + 1)
        assert len(history) == i + 1 and all(h is x for h, x in zip(history, xs))


def test_inference_mode_and_no_grad_are_different_specializations():
    def f(x):
        with torch.enable_grad():
            return x * 2

    jf = thunder.jit(f)
    x = torch.randn(3)
    with torch.no_grad():
        assert jf(x).requires_grad is f(x).requires_grad
    with torch.inference_mode():
        assert jf(x).requires_grad is f(x).requires_grad
    assert thunder.cache_misses(jf) == 2
