//! Event-driven simulator over a Plan's dependency DAG. Being built.
