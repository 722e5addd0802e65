//! Skew statistics: SABRE's max-to-mean ratios (send, recv, overall) and Gini.
