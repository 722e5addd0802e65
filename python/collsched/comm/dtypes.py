"""torch dtypes <-> small integers, for descriptors that ranks exchange as int64 tensors.

One table for the runtime (``comm/api.py``) and the MoE layer (``moe/buffer.py``), so an error
about ranks that disagree names the dtypes (``rank 3 has bfloat16``) instead of codes.
The order is fixed forever (append only): the codes travel between ranks.
"""
from __future__ import annotations

import torch

DTYPES: list[torch.dtype] = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8,
                             torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]
# Newer dtypes, appended where this torch has them (a rank without one never sends its code).
for _name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
    if hasattr(torch, _name):
        DTYPES.append(getattr(torch, _name))
DTYPE_CODE: dict[torch.dtype, int] = {d: i + 1 for i, d in enumerate(DTYPES)}
UNKNOWN = 99  # a dtype not in the table (no rank accepts it)


def dtype_code(dtype) -> int:
    """The code of ``dtype`` (1, 2, ...), or ``UNKNOWN`` for a dtype outside the table.

    Args:
        dtype (torch.dtype): any dtype.

    Returns:
        int: its code, the same on every rank.
    """
    return DTYPE_CODE.get(dtype, UNKNOWN)


def dtype_name(code: int) -> str:
    """The name of a dtype code (``"bfloat16"``), or ``"dtype#<code>"`` for one outside the table.

    Args:
        code (int): a code from :func:`dtype_code` (0 is "no tensor", also ``dtype#0``).

    Returns:
        str: the dtype's name without ``torch.``.
    """
    code = int(code)
    return str(DTYPES[code - 1]).replace("torch.", "") if 1 <= code <= len(DTYPES) else f"dtype#{code}"
