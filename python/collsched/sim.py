"""Simulator and lower bound (being built).

API contract (other modules rely on it):
    lower_bound(traffic, cluster) -> Bound          # .seconds (float), .term (str), .terms (dict str->float)
    simulate(plan, cluster, **opts) -> SimResult    # .time_s, .algbw_gbps, .lower_bound_s, .bound_term,
                                                    # .ratio_to_bound, .steps, .scaleout_bytes,
                                                    # .transfer_start_s / .transfer_end_s (numpy, per transfer),
                                                    # .step_times (list of (start, end)), .link_utilisation (dict)
"""
