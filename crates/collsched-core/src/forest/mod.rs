//! ForestColl: spanning-tree packing for allgather/reduce-scatter/allreduce. Being built.
