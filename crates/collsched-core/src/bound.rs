//! Lower bound on all-to-all(v) completion time (FAST Theorem 1 generalised). Being built.
