//! Max-flow and bipartite matching. Being built.
