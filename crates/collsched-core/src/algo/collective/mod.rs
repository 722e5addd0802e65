//! Baseline producers for allgather / reduce-scatter / allreduce (ring, single-root tree). Being built.
