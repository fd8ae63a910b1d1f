"""What the sweeps over libraries' models share: a time limit and one verdict line per model, and the first of
several ways to build a model that eager can run."""
from __future__ import annotations

import signal
import time
import traceback


class Timeout(Exception):
    pass


def _alarm(*_):
    raise Timeout()


def first_that_runs(attempts):
    """(the result of the first attempt that does not raise, None), or (None, the last failure)."""
    failure = "no attempt"
    for attempt in attempts:
        try:
            return attempt(), None
        except Timeout:
            raise
        except Exception as e:  # noqa: BLE001
            failure = f"{type(e).__name__}: {str(e)[:150]}"
    return None, failure


def sweep(cases, seconds: int, width: int):
    """Runs each ``(name, verdict)`` of ``cases`` (``verdict()`` returns (verdict, detail)) within ``seconds``, and
    prints a line for it: its verdict, the time it took and the detail, or TIMEOUT, or ERROR and where it raised."""
    signal.signal(signal.SIGALRM, _alarm)
    for name, verdict_of in cases:
        start = time.perf_counter()
        signal.alarm(seconds)
        try:
            verdict, detail = verdict_of()
        except Timeout:
            verdict, detail = "TIMEOUT", ""
        except Exception as e:  # noqa: BLE001
            where = " <- ".join(f"{f.filename.split('site-packages/')[-1]}:{f.lineno}"
                                for f in traceback.extract_tb(e.__traceback__)[-3:])
            verdict, detail = "ERROR", f"{type(e).__name__}: {str(e)[:200]} @ {where}"
        finally:
            signal.alarm(0)
        print(f"{name:{width}s} {verdict:9s} {time.perf_counter() - start:6.1f}s {detail}", flush=True)


def bit_for_bit(e, t) -> bool:
    """BITWISE: equal values and zeros of equal signs (``torch.equal`` takes -0.0 for 0.0)."""
    from tests.parity import _bit_for_bit

    return _bit_for_bit(t, e)


def as_close_as_eager(e, t, r, factor: float = 4.0) -> bool:
    """Whether thunder's ``t`` is as close to the float64 values ``r`` as eager's ``e`` is (fused kernels round
    otherwise): element by element (``tests/program_generator._rounding_only``), or else as a whole, its largest
    error within ``factor`` times eager's (a model that amplifies rounding, a batch norm of two samples, scatters the
    elementwise errors of both runs). Equal tensors are close."""
    import torch

    from tests.program_generator import _rounding_only

    if torch.equal(e, t) or _rounding_only(e, t, r, factor):
        return True
    if not (isinstance(r, torch.Tensor) and e.is_floating_point() and r.shape == e.shape):
        return False
    r64, e64, t64 = r.detach().double(), e.double(), t.double()
    if not torch.equal(torch.isfinite(e64), torch.isfinite(t64)):
        return False
    fin = torch.isfinite(e64) & torch.isfinite(r64)
    err_e, err_t = (e64 - r64)[fin].abs(), (t64 - r64)[fin].abs()
    return bool(err_t.numel() == 0 or err_t.max() <= factor * err_e.max() + 1e-5 + 1e-4 * r64[fin].abs().max())
