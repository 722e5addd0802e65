"""Whether this host can build testbed fabrics (root, iproute2, namespaces): the skip marker the
testbed tests share, with the reason when it cannot."""
from __future__ import annotations

import pytest

from collsched.testbed.fabric import TestbedError, check_available


def _why_not() -> str | None:
    try:
        check_available()
    except TestbedError as e:
        return str(e)
    return None


REASON = _why_not()
needs_netns = pytest.mark.skipif(REASON is not None, reason=f"testbed unavailable: {REASON}")
