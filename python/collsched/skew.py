"""Skew statistics: SABRE's max-to-mean ratios and Gini (being built).

API contract: mtm(traffic, cluster) -> MTM(send, recv, overall); gini(traffic) -> float.
"""
