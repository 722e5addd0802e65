"""Token-level MoE dispatch and combine (Fusco): tokens and experts in, expert-major rows out,
one copy per token per destination node through balanced forwarders, partial reduction in
combine. See docs/moe.md.

``MoEBuffer`` moves tokens; ``dispatch``/``combine`` are its autograd functions;
``collsched.moe.plans`` writes whole collsched Plans for small cases (verified), and
``collsched.moe.sim`` the aggregated plans `collsched moe simulate` runs.
"""
import importlib

from collsched.moe.balancer import balance_forwarders

# The token path needs torch; load it on first use so `collsched moe simulate` and the CLI's
# start-up do not pay for importing torch.
_LAZY = {"Layout": "routing", "default_placement": "routing", "MoEBuffer": "buffer", "Dispatched": "buffer",
         "DispatchHandle": "buffer", "dispatch": "autograd", "combine": "autograd"}

__all__ = ["MoEBuffer", "Dispatched", "DispatchHandle", "dispatch", "combine", "Layout", "balance_forwarders",
           "default_placement"]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"collsched.moe.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'collsched.moe' has no attribute {name!r}")
