//! General capacitated directed graphs of compute and switch nodes (ForestColl's input).
//! Filled in by the ForestColl work; the Cluster lowering lives here too.
