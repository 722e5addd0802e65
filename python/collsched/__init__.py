"""collsched: planner and runtime for collective communication on two-tier GPU clusters.

The spine: an algorithm turns a demand (traffic matrix or collective) on a
topology into a :class:`Plan`; the same Plan is verified, simulated, executed,
exported and drawn.
"""
from collsched._core import Cluster, Plan, RankPlan, VerificationError
from collsched import traffic
from collsched.planning import plan_all_to_all, plan_for_rank, all_to_all_algorithms
from collsched.units import parse_bytes, parse_bandwidth, format_bytes
from collsched.sim import simulate, lower_bound
from collsched.collectives import all_gather_into_tensor, reduce_scatter_tensor, all_reduce, plan_collective
from collsched.choose import Choice, choose

__all__ = [
    "Cluster",
    "Plan",
    "RankPlan",
    "VerificationError",
    "traffic",
    "plan_all_to_all",
    "plan_for_rank",
    "all_to_all_algorithms",
    "parse_bytes",
    "parse_bandwidth",
    "format_bytes",
    "simulate",
    "lower_bound",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "all_reduce",
    "plan_collective",
    "choose",
    "Choice",
]
__version__ = "0.2.0"


def __getattr__(name):
    # The runtime needs torch; load it only when someone asks for it.
    if name == "all_to_all_single":
        from collsched.comm.api import all_to_all_single

        globals()[name] = all_to_all_single  # later lookups skip this hook (it ran on every call)
        return all_to_all_single
    if name in ("nn", "comm", "moe", "testbed"):
        import importlib

        return importlib.import_module(f"collsched.{name}")
    raise AttributeError(f"module 'collsched' has no attribute {name!r}")
