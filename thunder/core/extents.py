"""Run-time extents: tensor sizes that are known only when the program runs.

[Note: run-time extents]
An operation whose output shape depends on tensor values (``nonzero``, one-argument ``where``,
``masked_select``, ``unique``, boolean-mask indexing, ...) gives each such extent a fresh int
``NumberProxy`` (``i0``), which the trace defines right after the operation from its output
(``i0 = t5.shape[0]``, ``prims.size``). Tensor proxies carry these NumberProxies in their shapes,
shapes print them by name (``cpu f32[i0, 4]``), and every later operation runs as it would for any
value of them, so one cache entry serves every call whatever the run-time extents.

- Arithmetic on extents is recorded (``i1 = i0 * 4``) and each extent carries a canonical polynomial
  (``Poly``) over the extents it comes from, so shape logic compares them exactly: ``4 * i0 == i0 * 4``.
  A comparison is answered only when it holds for every value (extents are >= 0); otherwise it raises
  ``DataDependentError``. The value of an extent is never specialized: ``if n == 0``, ``range(n)`` and
  ``int(n)`` raise ``DataDependentError`` naming the operation the extent comes from.
- What torch clamps or divides is a *derived* extent: ``x[:-1]`` and ``x[1:]`` of ``i0`` rows have
  ``max(0, i0 - 1)`` rows, ``x[::2]`` has ``(i0 + 1) // 2``, recorded as ``i2 = max(i1, 0)`` or ``i3 = i2 // 2``.
  Its polynomial's root is named by what it computes (``Poly.derived_root``), so every computation of the same
  clamp or quotient in a trace gives the same extent (``x[1:] - x[:-1]`` broadcasts), and it is evaluated from
  the roots it is computed from.
- Broadcasting follows torch's size-oblivious rule: a run-time extent is never taken to be 1
  (``is_one``), and identical extents match.
- Definitions are recorded where their inputs exist. An extent used by the outputs of a composite
  symbol but defined inside it is moved out to the enclosing scope (``hoist``), arithmetic before the
  composite and output-size bindings after it, so the composite still runs as one torch call.
"""
from __future__ import annotations

import operator

from thunder.core.proxies import NumberProxy, TensorProxy

# ---------------------------------------------------------------------------------------------
# Polynomials over extents
# ---------------------------------------------------------------------------------------------


class Poly:
    """An integer polynomial ``sum(coeff * product(roots))``: terms map sorted tuples of root names to coefficients."""

    __slots__ = ("terms", "roots", "nonneg", "derived")

    def __init__(self, terms: dict, roots: dict, nonneg: frozenset, derived: dict | None = None):
        self.terms = {m: c for m, c in terms.items() if c != 0}
        self.roots = roots  # name -> NumberProxy
        self.nonneg = nonneg  # roots known to be >= 0
        # name of a derived root -> (its function: "max0" or "floordiv", the polynomial it is of, the divisor)
        self.derived = derived or {}

    @staticmethod
    def const(c: int) -> "Poly":
        return Poly({(): c}, {}, frozenset())

    @staticmethod
    def root(p: NumberProxy, nonneg: bool) -> "Poly":
        return Poly({(p.name,): 1}, {p.name: p}, frozenset({p.name}) if nonneg else frozenset())

    @staticmethod
    def derived_root(fn: str, inner: "Poly", p: NumberProxy, divisor: int = 1) -> "Poly":
        """The root ``max(0, inner)`` (``fn`` "max0") or ``inner // divisor`` (a positive int; ``fn`` "floordiv"),
        ``p`` its value: named by what it is computed from, so that every computation of it in a trace (``y[1:]`` and
        ``y[:-1]`` of a run-time extent, ``x[::2]`` twice) gives the same polynomial."""
        name = f"max(0, {inner.canonical()})" if fn == "max0" else f"({inner.canonical()}) // {divisor}"
        lower = inner.bounds()[0]
        nonneg = fn == "max0" or lower is not None and lower >= 0
        return Poly({(name,): 1}, {name: p}, frozenset({name}) if nonneg else frozenset(),
                    {**inner.derived, name: (fn, inner, divisor)})

    def _join(self, other, terms):
        return Poly(terms, {**self.roots, **other.roots}, self.nonneg | other.nonneg, {**self.derived, **other.derived})

    def __add__(self, other: "Poly") -> "Poly":
        terms = dict(self.terms)
        for m, c in other.terms.items():
            terms[m] = terms.get(m, 0) + c
        return self._join(other, terms)

    def __neg__(self) -> "Poly":
        return Poly({m: -c for m, c in self.terms.items()}, self.roots, self.nonneg, self.derived)

    def __sub__(self, other: "Poly") -> "Poly":
        return self + (-other)

    def __mul__(self, other: "Poly") -> "Poly":
        terms: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = tuple(sorted(m1 + m2))
                terms[m] = terms.get(m, 0) + c1 * c2
        return self._join(other, terms)

    def key(self) -> tuple:
        return tuple(sorted(self.terms.items()))

    def constant(self):
        """The value if the polynomial is a constant, else None."""
        if not self.terms:
            return 0
        if set(self.terms) == {()}:
            return self.terms[()]
        return None

    def exact_div(self, other: "Poly"):
        """``self // other`` when ``other`` divides ``self`` exactly as polynomials with integer coefficients
        (``32*i0 + 320`` by ``2*i0 + 20`` is ``16``); else None. Long division by leading terms (degree, then names):
        with one divisor, its remainder is zero exactly when the division is."""
        if not other.terms:
            return None
        lead = max(other.terms, key=_monomial_order)
        lead_c = other.terms[lead]
        quotient, rest = {}, Poly(dict(self.terms), self.roots, self.nonneg, self.derived)
        while rest.terms:
            m = max(rest.terms, key=_monomial_order)
            c = rest.terms[m]
            factor = _monomial_div(m, lead)
            if factor is None or c % lead_c:
                return None
            quotient[factor] = quotient.get(factor, 0) + c // lead_c
            rest = rest - other * Poly({factor: c // lead_c}, {}, frozenset())
        return self._join(other, quotient)

    def bounds(self) -> tuple:
        """(lower, upper) bounds that hold for every value of the roots (None: unbounded)."""
        const = self.terms.get((), 0)
        others = [(m, c) for m, c in self.terms.items() if m != ()]
        if not others:
            return const, const
        if any(r not in self.nonneg for m, _ in others for r in m):
            return None, None
        lower = const if all(c > 0 for _, c in others) else None
        upper = const if all(c < 0 for _, c in others) else None
        return lower, upper

    def value(self, values: dict) -> int:
        """The value given the values of the roots it is built from (by name; see ``base_roots``)."""
        def root(r):
            if r not in self.derived:
                return values[r]
            fn, inner, divisor = self.derived[r]
            return max(0, inner.value(values)) if fn == "max0" else inner.value(values) // divisor

        total = 0
        for monomial, c in self.terms.items():
            for r in monomial:
                c *= root(r)
            total += c
        return total

    def base_roots(self) -> dict:
        """name -> NumberProxy of the roots the value is computed from: a derived root stands for those of what it is
        computed from."""
        out = {}
        for name, p in self.roots.items():
            if name in self.derived:
                out.update(self.derived[name][1].base_roots())
            else:
                out[name] = p
        return out

    def canonical(self) -> str:
        """The polynomial as text, its terms in order: equal polynomials print alike."""
        return " + ".join(f"{c}*{'*'.join(m)}" if m else str(c) for m, c in sorted(self.terms.items())) or "0"

    __repr__ = canonical


def _monomial_order(m: tuple):
    return len(m), m


def _monomial_div(m: tuple, d: tuple):
    """The monomial ``m / d`` (sorted tuples of root names, with repeats), or None if ``d`` does not divide ``m``."""
    rest = list(m)
    for r in d:
        if r not in rest:
            return None
        rest.remove(r)
    return tuple(rest)


def poly_of(x) -> Poly:
    """The polynomial of an int or NumberProxy (a NumberProxy without one is an opaque root)."""
    if isinstance(x, NumberProxy):
        if x.poly is not None:
            return x.poly
        return Poly.root(x, nonneg=False)
    return Poly.const(int(x))


def is_runtime(x) -> bool:
    """Whether ``x`` is a NumberProxy whose value is known only at run time (an extent or computed from one)."""
    return isinstance(x, NumberProxy) and x.origin is not None


# ---------------------------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------------------------

# op -> (the sign facts of ``a - b`` under which op(a, b) holds, those under which it fails)
_DECIDE = {
    operator.eq: (("zero",), ("positive", "negative")),
    operator.ne: (("positive", "negative"), ("zero",)),
    operator.lt: (("negative",), ("nonnegative",)),
    operator.le: (("nonpositive",), ("positive",)),
    operator.gt: (("positive",), ("nonpositive",)),
    operator.ge: (("nonnegative",), ("negative",)),
}
_SYMBOLS = {operator.eq: "==", operator.ne: "!=", operator.lt: "<", operator.le: "<=", operator.gt: ">",
            operator.ge: ">="}


def decide(op, a, b):
    """``op(a, b)`` if it holds (or fails) for every value of the run-time extents involved, else None."""
    if isinstance(b, float) or isinstance(a, float):
        return None
    lo, hi = (poly_of(a) - poly_of(b)).bounds()
    facts = {"zero": lo == hi == 0, "positive": lo is not None and lo > 0, "nonnegative": lo is not None and lo >= 0,
             "negative": hi is not None and hi < 0, "nonpositive": hi is not None and hi <= 0}
    holds, fails = _DECIDE[op]
    if any(facts[f] for f in holds):
        return True
    if any(facts[f] for f in fails):
        return False
    return None


def compare(op, a, b) -> bool:
    """``op(a, b)`` for Python code: answered when it holds for every run-time value; otherwise by the values of the
    extents where the tracing driver can compute them (see [Note: value guards] in thunder/driver/value_guards.py),
    else DataDependentError."""
    result = decide(op, a, b) if _comparable(a) and _comparable(b) else None
    if result is None:
        from thunder.core.trace import get_tracectx

        what = f"The comparison {_name(a)} {_SYMBOLS[op]} {_name(b)}"
        by_values = getattr(get_tracectx(), "extent_comparisons", None)
        if by_values is not None:
            return by_values(op, a, b, what)
        p = a if is_runtime(a) else b
        raise p.data_dependent(what)
    return result


def clamp_at_zero(x):
    """``max(0, x)`` of an int or an int NumberProxy, as torch clamps a slice's bounds and extent (``y[:-1]`` of ``i0``
    rows has ``max(0, i0 - 1)``). Where the sign is not known for every run-time value, the result is a new extent
    recorded as ``max(x, 0)``, whose polynomial names what it clamps (``Poly.derived_root``)."""
    if not is_runtime(x):
        return max(0, x)
    lo, hi = poly_of(x).bounds()
    if lo is not None and lo >= 0:
        return x
    if hi is not None and hi <= 0:
        return 0
    from thunder.core import prims

    return prims.maximum(x, 0)


def _comparable(x) -> bool:
    return isinstance(x, NumberProxy) and x.python_type is int or isinstance(x, int)


def _name(x) -> str:
    return x.name if isinstance(x, NumberProxy) else repr(x)


def same(a, b) -> bool:
    """Whether two extents are equal for every run-time value (thunder's shape logic: never raises)."""
    if a is b:
        return True
    if not (is_runtime(a) or is_runtime(b)):
        return a == b
    return decide(operator.eq, a, b) is True


def assume_equal(a, b, where: str) -> bool:
    """Whether two extents are equal, for shape logic that needs them to match (broadcasting, a product's inner
    extents, expanding): where not decided for every value, decided by their values where the tracing driver can
    compute them from the call's arguments (a guard the prologue checks, see [Note: value guards] in
    thunder/driver/value_guards.py: PyTorch Geometric's ``to_dense_batch`` mask selects as many rows as there are
    nodes), the run-time one then standing for the other in the rest of the trace; else NotImplementedError."""
    if same(a, b):
        return True
    if not (is_runtime(a) or is_runtime(b)) or decide(operator.eq, a, b) is False:
        return False
    from thunder.core.proxies import DataDependentError
    from thunder.core.trace import get_tracectx

    by_values = getattr(get_tracectx(), "extent_comparisons", None)
    refused = ""
    if by_values is not None and _comparable(a) and _comparable(b):
        try:
            equal = by_values(operator.eq, a, b, f"Deciding whether they are equal")
        except DataDependentError as e:
            refused = f" {e}"
        else:
            if equal:  # from now on the later extent is the earlier one
                later, earlier = (b, a) if is_runtime(b) else (a, b)
                later.poly = poly_of(earlier)
            return equal
    raise NotImplementedError(unknown_equality(a, b, where) + refused)


def unknown_equality(a, b, where: str) -> str:
    """The error for shape logic that needs two different extents, at least one known only at run time, to match."""
    said = "; ".join(f"{x.name} is {x.origin}" for x in (a, b) if is_runtime(x))
    return (f"thunder cannot tell whether the extents {_name(a)} and {_name(b)} are equal ({where}); {said}. "
            "They may be equal when the program runs, but thunder traces it for all values: compute both from the same "
            "operation (e.g. select with one mask or one set of indices and reuse it).")


def is_one(x) -> bool:
    """Whether an extent is 1; a run-time extent never is (torch's size-oblivious rule), unless the trace equated it
    with 1 (``assume_equal``: a data-dependent count of 1 broadcast against 5, which the prologue checks)."""
    return _constant(x) == 1


def is_zero(x) -> bool:
    """Whether an extent is 0; a run-time extent is taken not to be (size-oblivious), unless equated with 0."""
    return _constant(x) == 0


def _constant(x):
    if not is_runtime(x):
        return x
    return x.poly.constant() if x.poly is not None else None


def same_shape(a, b) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def is_symbolic_shape(shape) -> bool:
    return any(isinstance(s, NumberProxy) for s in shape)


def as_extent(s):
    """A size argument as an extent: ints stay, run-time extents stay, other numbers are specialized to ints."""
    if isinstance(s, NumberProxy):
        if s.origin is not None:
            if s.python_type is not int:
                raise TypeError(f"a tensor size must be an int, got {s.name} of type {s.python_type.__name__}")
            return s
        return s.__index__()
    return operator.index(s)


def prod(values):
    """The product of ints and extents (recorded arithmetic where run-time extents are involved)."""
    static, dynamic = 1, []
    for v in values:
        if is_runtime(v):
            dynamic.append(v)
        else:
            static *= v
    out = static
    for v in dynamic:
        out = v if out == 1 and not isinstance(out, NumberProxy) else out * v
    return out


def prod_poly(values) -> Poly:
    out = Poly.const(1)
    for v in values:
        out = out * poly_of(v)
    return out


def infer_shape(input_shape, shape) -> tuple:
    """``shape`` with its -1 resolved for an input of ``input_shape``, where run-time extents are involved:
    the -1 is the input's size divided exactly by the other extents (``(i0, 4)`` viewed as ``(-1,)`` is ``4 * i0``)."""
    total, shape = prod_poly(input_shape), list(shape)
    if -1 in shape:
        i = shape.index(-1)
        inferred = total.exact_div(prod_poly(s for j, s in enumerate(shape) if j != i))
        if inferred is None:
            raise NotImplementedError(
                f"thunder cannot infer the -1 in shape {list(shape)} for an input of shape {tuple(input_shape)}: the "
                "other extents do not divide the input's size exactly for every run-time value. Give the extent explicitly.")
        shape[i] = materialize(inferred)
    if prod_poly(shape).key() != total.key():
        runtime = [x for x in tuple(input_shape) + tuple(shape) if is_runtime(x)]
        if runtime:  # the sizes match only for some values of the extents (x[mask].reshape(1, 10): when 10 are selected)
            raise runtime[0].data_dependent(f"Reshaping a tensor of shape {tuple(input_shape)} to {list(shape)}")
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of shape {tuple(input_shape)}")
    return tuple(shape)


def materialize(poly: Poly):
    """An int or NumberProxy with the value of ``poly`` (recording the arithmetic it needs)."""
    c = poly.constant()
    if c is not None:
        return c
    if len(poly.terms) == 1:
        (m, c), = poly.terms.items()
        if c == 1 and len(m) == 1:
            return poly.roots[m[0]]
    out = None
    for m, c in sorted(poly.terms.items()):
        term = c
        for r in m:
            term = poly.roots[r] if term == 1 and not isinstance(term, NumberProxy) else term * poly.roots[r]
        out = term if out is None else out + term
    return out


# ---------------------------------------------------------------------------------------------
# Fresh extents and where they are defined
# ---------------------------------------------------------------------------------------------


def fresh(trace, origin: str) -> NumberProxy:
    """A new run-time extent, bound to its value after the operation that produces it is recorded."""
    p = NumberProxy(trace.make_name("i"), int, None, frozenset(), origin=origin)
    p.poly = Poly.root(p, nonneg=True)
    trace.has_extents = True
    trace.unbound_extents.append(p)
    return p


def _extent_positions(outs):
    for o in outs:
        if isinstance(o, TensorProxy) and is_symbolic_shape(o.shape):
            for d, s in enumerate(o.shape):
                if isinstance(s, NumberProxy):
                    yield s, o, d


def record(trace, bsym):
    """Records ``bsym``, moving out of it the definitions of extents its outputs use (see [Note: run-time extents])."""
    before, after = _hoisted(bsym) if bsym.subsymbols else ((), ())
    if before or after:
        moved = {id(b) for b in (*before, *after)}
        bsym = bsym.replace(subsymbols=tuple(b for b in bsym.subsymbols if id(b) not in moved))
    for b in before:
        trace.record(b)
    trace.record(bsym)
    for b in after:
        trace.record(b)
    if trace.unbound_extents:
        _bind(trace, bsym)
    return bsym


def _bind(trace, bsym):
    """Defines the fresh extents that appear in ``bsym``'s outputs: ``i0 = t5.shape[0]``."""
    from thunder.core import prims
    from thunder.core.symbol import BoundSymbol

    pending = {id(p) for p in trace.unbound_extents}
    for p, o, d in _extent_positions(bsym.flat_outs):
        if id(p) in pending:
            pending.discard(id(p))
            trace.record(BoundSymbol(prims.size, (o, d), {}, p))
    trace.unbound_extents[:] = [p for p in trace.unbound_extents if id(p) in pending]


def _hoisted(bsym) -> tuple:
    """(before, after): bound symbols of ``bsym``'s decomposition that define extents its outputs use."""
    outs = bsym.flat_outs
    needed = [p for p, _, _ in _extent_positions(outs)]
    if not needed:
        return (), ()
    defs = {}
    for b in bsym.subsymbols:
        for o in b.flat_outs:
            if isinstance(o, NumberProxy):
                defs[o.name] = b
    if not any(p.name in defs for p in needed):
        return (), ()
    out_ids = {id(o) for o in outs}
    positions = {id(p): (o, d) for p, o, d in _extent_positions(outs)}
    before, after, placed = [], [], {}

    def place(name):
        b = defs[name]
        if id(b) in placed:
            return placed[id(b)]
        deps = [place(a.name) for a in b.flat_args if isinstance(a, NumberProxy) and a.name in defs]
        tensors = [a for a in b.flat_args if isinstance(a, TensorProxy)]
        if not tensors and all(d == "before" for d in deps):
            before.append(b)
            placed[id(b)] = "before"
            return "before"
        if _read_inside(bsym, b):
            raise NotImplementedError(
                f"thunder cannot define the run-time extent {name} outside {bsym.sym.id}: its decomposition both "
                "computes it from an intermediate value and uses it. Split the operation into simpler torch calls.")
        if tensors and id(tensors[0]) not in out_ids:  # a size binding of an intermediate: read it from an output
            o, d = positions[id(b.output)]
            b = b.replace(args=(o, d))
        after.append(b)
        placed[id(defs[name])] = "after"
        return "after"

    for p in needed:
        if p.name in defs:
            place(p.name)
    return tuple(before), tuple(after)


def _read_inside(bsym, definition) -> bool:
    names = {o.name for o in definition.flat_outs}
    return any(a.name in names for b in bsym.subsymbols if b is not definition for a in b.flat_args)


def unify(old, new) -> dict:
    """After re-tracing an operation (autodiff), its fresh extents denote the original ones. Returns the original
    extents' names -> the fresh extents that stand for them (what reads the original outputs reads those)."""
    renamed = {}
    for o, n in zip(_flat_tensors(old), _flat_tensors(new)):
        if o is n or o.ndim != n.ndim:
            continue
        for a, b in zip(o.shape, n.shape):
            if is_runtime(a) and is_runtime(b) and a is not b:
                renamed.setdefault(a.name, b)
                if b.poly is not None and len(b.poly.terms) == 1 and b.poly.key() == ((((b.name,), 1),)):
                    b.poly = poly_of(a)
                elif poly_of(a).constant() is not None:  # an extent traced equal to a number (``assume_equal``,
                    b.poly = poly_of(a)  # checked by the prologue): its fresh copy is too (zuko's RealNVP: i2 + 2)
    return renamed


def _flat_tensors(x):
    from thunder.core.codeutils import flat_proxies

    return [p for p in flat_proxies(x) if isinstance(p, TensorProxy)]
