"""SMs that communication kernels hold while they run beside compute (``data/comm_kernels.yaml``).

Every figure is sourced in the YAML: NCCL runs one CTA (one SM) per channel, with 24 / 16 channels
inside an Ampere / Hopper node and 2 per NIC for rings that leave the node; Transformer Engine's
userbuffers and DeepEP take the SMs NeMo's and DeepEP's own settings give them.

>>> nccl_channels("hopper", spans_nodes=False, nics_per_node=8)
16
>>> nccl_channels("ampere", spans_nodes=True, nics_per_node=8)
16
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

from strategies.documents import load_document
from strategies.errors import ConfigError
from topologies.gpus import DATA_DIR, check_keys

COMM_KERNELS_PATH = os.path.join(DATA_DIR, "comm_kernels.yaml")


@dataclass(frozen=True)
class CommKernels:
    """SM counts of the communication kernels (see the YAML for sources)."""

    intra_node_channels: dict
    inter_node_channels_per_nic: int
    ub_ring_exchange_sms: int
    ub_pipeline_sms: int
    ub_fc2_pipeline_sms: int
    ub_pipeline_splits: int
    ub_bulk_sms: int
    deepep_sms: int

    def pipeline_sms(self, op_name: str) -> int:
        """SMs Transformer Engine's pipelined GEMM + reduce-scatter holds beside the row-parallel GEMM
        ``op_name``: the MLP's down projection is ``fc2_fprop``, any other the attention projection
        ``proj_fprop`` (TE v1.8 module/base.py initialize_ub names; the YAML's [TE-UB-LAUNCHER])."""
        return self.ub_fc2_pipeline_sms if op_name.startswith("mlp") else self.ub_pipeline_sms


def _positive_int(d: dict, key: str, where: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1 or v > 1024:
        raise ConfigError(f"{where}: {key} = {v!r} must be an integer in [1, 1024]")
    return v


@cache
def comm_kernels(path: str = COMM_KERNELS_PATH) -> CommKernels:
    data = load_document(path, "communication-kernel file") or {}
    where = f"communication-kernel file {path!r}"
    check_keys(data, ("nccl", "te_userbuffers", "deepep"), where)
    nccl, ub, ep = data.get("nccl") or {}, data.get("te_userbuffers") or {}, data.get("deepep") or {}
    check_keys(nccl, ("intra_node_channels", "inter_node_channels_per_nic"), where + " nccl")
    check_keys(ub, ("ring_exchange_sms", "pipeline_sms", "fc2_pipeline_sms", "pipeline_splits", "bulk_sms"),
               where + " te_userbuffers")
    check_keys(ep, ("sms",), where + " deepep")
    intra = nccl.get("intra_node_channels") or {}
    return CommKernels(
        intra_node_channels={str(k): _positive_int(intra, k, where + " nccl.intra_node_channels") for k in intra},
        inter_node_channels_per_nic=_positive_int(nccl, "inter_node_channels_per_nic", where + " nccl"),
        ub_ring_exchange_sms=_positive_int(ub, "ring_exchange_sms", where + " te_userbuffers"),
        ub_pipeline_sms=_positive_int(ub, "pipeline_sms", where + " te_userbuffers"),
        ub_fc2_pipeline_sms=_positive_int(ub, "fc2_pipeline_sms", where + " te_userbuffers"),
        ub_pipeline_splits=_positive_int(ub, "pipeline_splits", where + " te_userbuffers"),
        ub_bulk_sms=_positive_int(ub, "bulk_sms", where + " te_userbuffers"),
        deepep_sms=_positive_int(ep, "sms", where + " deepep"),
    )


def nccl_channels(architecture: str, *, spans_nodes: bool, nics_per_node: int) -> int:
    """Execution channels (= SMs, one CTA each) of an NCCL ring collective: the architecture's
    intra-node count inside a node, 2 per NIC when the ring leaves the node. An architecture without
    a figure takes Hopper's."""
    k = comm_kernels()
    if spans_nodes:
        return k.inter_node_channels_per_nic * max(int(nics_per_node), 1)
    return k.intra_node_channels.get(architecture, k.intra_node_channels.get("hopper", 16))
