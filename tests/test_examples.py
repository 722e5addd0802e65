"""The scripts in examples/ run the way their docstrings tell a user to: torchrun, 4 Gloo ranks, 2 steps.

Each test starts ``torchrun --standalone --nproc-per-node 4 examples/<script> --steps 2`` (collsched
planning for 2 nodes of 2: ``--cluster h200:2,gpus=2``), kills the whole process group if it runs
past TIMEOUT_S, and checks what rank 0 printed: a finite, positive loss for each step and the closing
line naming collsched's dispatcher inside the framework's layer. Skipped, with the reason, where the
framework is not installed.
"""
from __future__ import annotations

import importlib.util
import math
import os
import re
import signal
import subprocess
import sys

import pytest
from test_moe_torchtitan import needs_torchtitan  # skips, naming the reason, without torchtitan 0.3.0

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(REPO, "examples")
WORLD, STEPS = 4, 2
TIMEOUT_S = 420  # both examples take well under a minute on 2 idle cores; the rest is headroom for a loaded machine


def _megatron_missing() -> str:
    return "" if importlib.util.find_spec("megatron") else "megatron-core is not installed (pip install 'collsched[megatron]')"


def run_example(script: str, *args: str) -> str:
    """Run examples/<script> under torchrun on WORLD CPU ranks; returns its output (stdout + stderr).

    Raises:
        AssertionError: it exited non-zero or ran past TIMEOUT_S (its process group is then killed).
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), CUDA_VISIBLE_DEVICES="",
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
           os.path.join(EXAMPLES, script), "--steps", str(STEPS), "--cluster", "h200:2,gpus=2", *args]
    # A session of its own: on a timeout, the ranks go down with torchrun.
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{script} ran past {TIMEOUT_S} s:\n{out[-3000:]}") from None
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{out[-4000:]}"
    return out


def check_output(out: str, done_pattern: str) -> None:
    losses = [float(v) for v in re.findall(r"^step \d+ loss (\S+)$", out, re.M)]
    assert len(losses) == STEPS, out[-3000:]
    assert all(math.isfinite(v) and v > 0 for v in losses), losses
    assert re.search(done_pattern, out, re.M), out[-3000:]


@pytest.mark.skipif(bool(_megatron_missing()), reason=_megatron_missing())
def test_megatron_example_trains_two_steps_on_four_gloo_ranks():
    out = run_example("megatron_moe.py")
    check_output(out, rf"^done: {STEPS} steps on {WORLD} ranks \(cpu\), megatron-core MoELayer with "
                      r"CollschedTokenDispatcher\(dedup='node'\), rank 0's last dispatch sent [1-9]\d* rows across nodes")


@needs_torchtitan
def test_torchtitan_example_trains_two_steps_on_four_gloo_ranks():
    out = run_example("torchtitan_moe.py", "--layers", "1")
    check_output(out, rf"^done: {STEPS} steps on {WORLD} ranks \(cpu\), torchtitan Qwen3-MoE \(layers=1\) with "
                      r"CollschedTokenDispatcher\(exchange='dedup'\)")
