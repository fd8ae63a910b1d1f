"""The examples run end to end."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_mnist_example_trains_and_prints_traces():
    proc = _run("examples/mnist_mlp.py", "--steps", "30", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Correctly guessed" in out
    assert "def augmented_forward_fn(" in out and "def backward_fn(saved_for_backward, cotangents):" in out
    assert "This is the trace that thunder executed for eval's computation:" in out
    assert out.count("Correctly guessed") == 3
