r"""CUDA graphs (``options.cuda_graphs``): which kernels the host no longer issues one by one.

Megatron-LM captures CUDA graphs three ways (NVIDIA/Megatron-LM d98e8a6, megatron/training/arguments.py
``--cuda-graph-impl``; the older ``--enable-cuda-graph`` = ``local`` and ``--external-cuda-graph`` =
``transformer_engine``):

* ``layers`` (``--cuda-graph-impl local``: megatron/core/transformer/cuda_graphs.py ``CudaGraphManager``;
  ``transformer_engine``: TE's ``make_graphed_callables``, transformer_engine/pytorch/graph.py, NVIDIA/
  TransformerEngine d0067d0): each transformer layer's forward is one graph and its backward another
  (``--cuda-graph-modules`` empty = the whole layer). The layer's tensor-parallel collectives run inside
  its linear modules, so they are captured with it (NCCL kernels replay like any other). What stays
  host-issued: the embedding and the output layer / loss (not TransformerLayers), the pipeline's p2p,
  the data-parallel gradient reduce-scatters and parameter all-gathers (distributed_data_parallel.py:
  the hooks return early while a graph is capturing and issue the bucket collectives outside it), and the
  optimizer. A dropless MoE layer cannot capture its experts (transformer_config.py: "moe cuda graph is
  only supported with drop-padding MoE"; the all-to-all dispatcher copies the token counts to the host),
  so its graph covers the layer up to the router (``--cuda-graph-modules attn moe_router``) and the
  expert dispatch, experts and combine (and what follows them in the layer) are issued by the host;
  with a capacity factor (drop-and-pad) the whole MoE layer is captured.
* ``full_iteration`` (megatron/core/full_cuda_graph.py ``FullCudaGraphWrapper``): the whole
  forward-backward of a step, every micro-batch and pipeline exchange included, is one graph ("1 CUDA
  graph for whole iteration excluding optimizer", transformer_config.py ``enable_cuda_graph``), so no
  layer waits on the host and the blocking exchange's host gap (``p2p_host_gap_us``) is gone.

**Host cost of a replay.** Each graph replay costs the host one ``cudaGraphLaunch``,
:data:`GRAPH_LAUNCH_US`, plus the static-input copy the replay wrapper issues eagerly (TE graph.py
``Graphed.forward``: ``static_input_surface[i].copy_(inputs[i])``; ``Graphed.backward``: ``g.copy_(grad)``),
one eager kernel at ``host_us_per_kernel``. The launch cost of a straight-line graph does not grow with
its kernels (NVIDIA technical blog, "Constant Time Launch for Straight-Line CUDA Graphs and Other
Performance Enhancements", CUDA 12.6, 2024); the figure is CUDA.jl's documented measurement (CUDA.jl
manual, "Graphs": an RK4 integration of 80 broadcast kernels launched as one graph takes 3.5 us of CPU
time, against ~260 us launched one by one). ASSUMED to carry over to a transformer layer's graph (not
straight-line: TE's multi-stream overlap, NCCL nodes); no GPU was available to measure one here.

**What is not changed.** The GPU's per-kernel ``launch_overhead_us`` (a placeholder in gpus.yaml) is kept
inside graphs too: no public figure for the in-graph kernel-to-kernel gap on Hopper was found to replace
it. The graph's static memory is in taskgraph/memory.py (``cuda_graph_buffer_bytes``).
"""
from __future__ import annotations

#: host seconds of one cudaGraphLaunch, microseconds (CUDA.jl manual "Graphs": 80 kernels, 3.5 us of CPU time;
#: constant in the node count for straight-line graphs, NVIDIA blog, CUDA 12.6) -- module docstring
GRAPH_LAUNCH_US = 3.5
#: eager kernels the replay wrapper issues per graph: the static input (forward) or grad-output (backward) copy
#: (TE graph.py Graphed.forward / Graphed.backward)
REPLAY_COPY_KERNELS = 1
#: the first operator of a MoE layer's expert part, which a dropless layer leaves outside its graph
MOE_EXPERTS_OP = "moe_experts"


def captured_mask(ops, mode: str, part: str, drop_pad: bool) -> tuple | None:
    """Which of a layer's ``ops`` (forward order) a graph captures under ``mode`` (options.cuda_graphs);
    ``part``: 'layer', 'embedding' or 'head'; ``drop_pad``: the MoE layer has a capacity factor.
    None = nothing captured (the host issues every kernel, as without graphs).

    >>> from types import SimpleNamespace as N
    >>> ops = [N(name=n) for n in ("qkv", "moe_router", "moe_experts", "mlp_residual")]
    >>> captured_mask(ops, "layers", "layer", drop_pad=False)
    (True, True, False, False)
    >>> captured_mask(ops, "layers", "layer", drop_pad=True)
    (True, True, True, True)
    >>> captured_mask(ops, "layers", "head", drop_pad=False) is None
    True
    >>> captured_mask(ops, "full_iteration", "head", drop_pad=False)
    (True, True, True, True)
    """
    if mode == "full_iteration":
        return (True,) * len(ops)
    if mode != "layers" or part != "layer":
        return None
    names = [o.name for o in ops]
    if drop_pad or MOE_EXPERTS_OP not in names:
        return (True,) * len(ops)
    cut = names.index(MOE_EXPERTS_OP)
    return tuple(i < cut for i in range(len(ops)))


def graph_runs(mask) -> int:
    """Graphs one pass of a layer replays: the maximal runs of captured operators.

    >>> graph_runs((True, True, False, True)), graph_runs((False,)), graph_runs(())
    (2, 0, 0)
    """
    return sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))


def replay_host_s(mode: str, host_s: float) -> float:
    """Host seconds per graph replay: the launch and the wrapper's static copy (module docstring); a
    full-iteration graph launches once per step for all layers, priced as nothing per layer.

    >>> round(replay_host_s("layers", 10e-6) * 1e6, 3), replay_host_s("full_iteration", 10e-6)
    (13.5, 0.0)
    """
    if mode == "full_iteration":
        return 0.0
    return GRAPH_LAUNCH_US * 1e-6 + REPLAY_COPY_KERNELS * host_s


def layer_graphs(opt, ops, part: str, host_s: float) -> tuple | None:
    """``host_bound``'s ``graphs`` argument (mask, replay seconds) for one layer, embedding or head under
    ``opt`` (the strategy's options); None without graphs or when nothing of it is captured."""
    mode = opt.cuda_graphs
    if mode == "none":
        return None
    mask = captured_mask(ops, mode, part, drop_pad=opt.moe_capacity_factor is not None)
    return None if mask is None else (mask, replay_host_s(mode, host_s))


__all__ = ["GRAPH_LAUNCH_US", "MOE_EXPERTS_OP", "REPLAY_COPY_KERNELS", "captured_mask", "graph_runs",
           "layer_graphs", "replay_host_s"]
