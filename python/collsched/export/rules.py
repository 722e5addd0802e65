"""Limits of the MSCCL executor's XML parser and interpreter (NCCL's
msccl-executor-nccl and RCCL share them). Sources are cited in docs/msccl.md;
the exporter stays inside them and the validator checks them.
"""
from __future__ import annotations

# msccl_struct.h
MAX_STEPS_PER_TB = 64  # MSCCL_MAX_NUM_STEPS: `s` < 64, transmissions[64], dependentBid[64]
MAX_COUNT = 72  # MSCCL_MAX_COUNT: 0 <= cnt < 72
MAX_TBS_PER_CHANNEL = 32  # MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL: sends (and recvs) per channel
MAX_CHANNEL = 32  # parser: `channelId < 0 || channelId > MAXCHANNELS` is rejected (MAXCHANNELS = 32)
EXPORT_CHANNELS = 32  # the exporter uses 0..31: channel 32 passes the parser but indexes past mscclChannels[32]
MAX_DEP_BID = 127  # dependentBid is int8_t
MAX_OFFSET = 32767  # srcOffset / dstOffset are int16_t
# Threadblocks of one rank wait on each other, so all must be resident at once. The
# original MSCCL capped them at 2 x 108 (A100's SMs); the NCCL executor allows 1024 but a
# GPU only runs a few hundred 640-thread blocks at once. `to_xml`'s automatic channel
# count keeps to one per SM of the smallest preset GPU (V100: 80), not a parser rule.
AUTO_MAX_THREADBLOCKS = 80
MAX_DEPS_PER_TB = 64  # dependentBid/dependentStep arrays have MSCCL_MAX_NUM_STEPS entries
# msccl_parser.h (RCCL's values; the NCCL executor's are larger)
MAX_ATTRS = 16
MAX_STR_LEN = 255
MAX_SUBS = 1024
MAX_NODES = 4096

PROTOCOLS = ("Simple", "LL", "LL128")
COLLECTIVES = (
    "reduce", "broadcast", "allreduce", "reducescatter", "allgather", "send", "recv",
    "gather", "scatter", "alltoall", "alltoallv",
)
BUFFERS = ("i", "o", "s")

# step type -> (sends, receives, checks src bounds, checks dst bounds), from the parser.
STEP_TYPES = {
    "s": (True, False, True, False),
    "r": (False, True, False, True),
    "rcs": (True, True, False, True),
    "rrs": (True, True, True, False),
    "rrc": (False, True, False, False),
    "rrcs": (True, True, True, True),
    "cpy": (False, False, True, True),
    "re": (False, False, True, True),
    "nop": (False, False, False, False),
}

ALGO_ATTRS = ("nchunksperloop", "nchannels", "ngpus", "proto", "coll", "minBytes", "maxBytes", "inplace", "outofplace")
GPU_ATTRS = ("id", "i_chunks", "o_chunks", "s_chunks")
TB_ATTRS = ("id", "send", "recv", "chan")
STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")

# collsched collective name -> MSCCL `coll` spelling.
COLL_NAME = {"all_gather": "allgather", "reduce_scatter": "reducescatter", "all_reduce": "allreduce"}

# The interpreter's loop (msccl_kernel.cu `mscclRunInterpreter`, msccl_setup.cc `mscclSetupCount`):
# each pass over the XML moves at most `chunkSize` bytes of every XML chunk, chunkSize =
# buffSizes[proto] / NCCL_STEPS * chunkSteps (chunkSteps = MSCCL_CHUNKSTEPS = NCCL_STEPS/2 for
# Simple, 1 otherwise), of which LL carries half as data and LL128 15/16. Defaults of NCCL's
# init.cc: NCCL_BUFFSIZE 4 MiB (Simple), LL 8 lines x 512 threads x 8 steps x 16 B,
# LL128 120 elems x 640 threads x 8 steps x 8 B. NCCL_STEPS = 8.
NCCL_STEPS = 8
DEFAULT_BUFFSIZE = {"Simple": 1 << 22, "LL": 8 * 512 * NCCL_STEPS * 16, "LL128": 120 * 640 * NCCL_STEPS * 8}


def loop_bytes(proto: str, buffsize: int | None = None) -> int:
    """Bytes of each XML chunk one interpreter iteration moves (the executor's chunkSize)."""
    if proto not in PROTOCOLS:
        raise ValueError(f"proto must be one of {', '.join(PROTOCOLS)}, got {proto!r}")
    step = (buffsize if buffsize is not None else DEFAULT_BUFFSIZE[proto]) // NCCL_STEPS
    if proto == "Simple":
        return step * (NCCL_STEPS // 2)  # 2 MiB by default
    if proto == "LL":
        return step // 2  # half of every 16-byte line is flags: 32 KiB
    return step // 16 * 15  # LL128: 15 of 16 words carry data: 576,000 B
