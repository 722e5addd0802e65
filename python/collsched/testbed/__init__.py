"""The two-tier fabric testbed: S servers × G ranks on network namespaces, shaped NICs,
the unchanged runtime on top (docs/testbed.md). Needs root and iproute2."""
from collsched.testbed.fabric import Fabric, FabricSpec, TestbedError, check_available, clean, list_namespaces
from collsched.testbed.model import DEFAULT_PARAMS, ModelParams, cluster_spec

__all__ = ["Fabric", "FabricSpec", "TestbedError", "check_available", "clean", "list_namespaces", "ModelParams",
           "DEFAULT_PARAMS", "cluster_spec"]
