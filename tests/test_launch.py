"""The local launcher's report of a rank that died: the error its stderr names, not only the tail."""
from __future__ import annotations

from collsched.comm.launch import RankFailure, _cause

WATCHDOG = """[rank1]:[E1126 11:54:01] [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated
terminate called after throwing an instance of 'c10::DistBackendError'
  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error
Exception raised from checkForNCCLErrorsInternal at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2212 (most recent call first):
""" + "frame #1: <unknown function> + 0x68ef03 (0x7ff09768ef03 in libtorch_cuda.so)\n" * 60


def test_a_dead_ranks_cause_is_the_cxx_what_line(tmp_path):
    p = tmp_path / "stderr1.log"
    p.write_text(WATCHDOG)
    cause = _cause(str(p))
    assert cause.startswith("[PG ID 0") and "remote process exited" in cause
    text = str(RankFailure(1, "died", stderr_tail=WATCHDOG[-2000:], cause=cause))
    assert text.startswith("rank 1 died: [PG ID 0") and "frame #1" in text


def test_a_dead_ranks_cause_falls_back_to_the_last_python_error(tmp_path):
    p = tmp_path / "stderr2.log"
    p.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\ntorch.OutOfMemoryError: CUDA out of memory\n")
    assert _cause(str(p)) == "OutOfMemoryError: CUDA out of memory"
    assert _cause(str(tmp_path / "missing.log")) == ""


def test_nccl_ranks_are_spawned_gloo_ranks_forked_on_linux():
    """NCCL ranks start fresh (a parent that touched the CUDA driver, as torch.cuda.is_available()
    does, cannot fork one); Gloo ranks fork on Linux while CUDA is untouched."""
    import sys

    from collsched.comm.launch import default_start_method

    assert default_start_method("nccl") == "spawn"
    assert default_start_method("NCCL") == "spawn"
    want = "fork" if sys.platform.startswith("linux") else "spawn"
    assert default_start_method("gloo") == want
