"""Token-level MoE dispatch and combine (Fusco): tokens and experts in, expert-major rows out,
one copy per token per destination node through balanced forwarders, partial reduction in
combine. See docs/moe.md.

``MoEBuffer`` moves tokens; ``dispatch``/``combine`` are its autograd functions;
``collsched.moe.plans`` writes whole collsched Plans for small cases (verified), and
``collsched.moe.sim`` the aggregated plans `collsched moe simulate` runs.
"""
from collsched.moe.routing import Layout, balance_forwarders, default_placement
from collsched.moe.buffer import Dispatched, DispatchHandle, MoEBuffer
from collsched.moe.autograd import combine, dispatch

__all__ = ["MoEBuffer", "Dispatched", "DispatchHandle", "dispatch", "combine", "Layout", "balance_forwarders",
           "default_placement"]
