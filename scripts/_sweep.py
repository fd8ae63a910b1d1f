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
