"""What a software stack (``taskgraph/stacks.py``) or dispatcher adds to the cost records
``taskgraph/costing.py`` builds: DeepSpeed's unfused fp32 gradient accumulation and serial pipeline
exchanges, PyTorch FSDP2's copy kernels and FSDP1's FlatParameter kernels, the operator as the run executes it (:func:`op_as_run`:
PyTorch's ring attention, ``taskgraph/torch_cp.py``; Transformer Engine's ring CP, ``taskgraph/te_cp.py``; DeepEP's permutations; an eager cross-entropy)."""
from __future__ import annotations

from dataclasses import replace

from taskgraph.cost import HP_GRAD_ACCUM_KERNELS, op_shape_key
from taskgraph.cross_entropy import cross_entropy_bytes
from taskgraph.fsdp1_flat import fsdp1_flat_times
from taskgraph.overheads import optimizer_value_bytes
from taskgraph.plan import DTYPE_BYTES, Plan
from taskgraph.stacks import DEFAULT_STACK, get_stack
from taskgraph.te_cp import te_ring_attention
from taskgraph.torch_cp import torch_ring_attention


def fsdp2_copy_times(gpu, params: float, n: int, p: int, g: int, shard: int = 4) -> tuple[float, float, float]:
    """Seconds of PyTorch FSDP2's copy kernels around one parameter group's collectives over ``n``
    ranks, ``params`` the group's unsharded (TP-shard) parameters: (all-gather copy-in, all-gather
    copy-out, reduce-scatter copy-in). Streaming copies at ``hbm_efficiency``, one launch each.

    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py (PyTorch 2.4-2.11), with torchtitan's
    MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) over fp32 shards:

    * foreach_all_gather, on the all-gather copy-in stream: the shard cast to the parameter dtype
      (``_foreach_copy_`` into a flat buffer: read 4, write p B per shard element) and
      all_gather_copy_in's ``_foreach_copy_`` into the all-gather input (read p, write p):
      (4 + 3p) params / n bytes; the all-gather waits for it.
    * foreach_all_gather_copy_out, on the compute stream after waiting for the all-gather:
      ``split_with_sizes_copy`` of the whole output into the per-parameter tensors (read p, write p):
      2p params bytes.
    * foreach_reduce's foreach_reduce_scatter_copy_in, on the compute stream before the reduce-scatter
      stream waits for it: ``chunk_cat`` of the unsharded gradients (read 2 B bf16) into the
      reduce-dtype input (write g B): (2 + g) params bytes.

    p = the gathered element's bytes (``costing.param_bytes``: 2, or 1 with an FP8 all-gather); g = the
    reduced gradient's (``costing.grad_bytes_per_param``: 4 with fp32 reduction); shard = the sharded
    parameter's (4: fp32; 2: bf16 without master weights, stacks.yaml [FSDP2-BF16]). When shard == p FSDP2
    clamps param_dtype to None (_fsdp_param.py init_dtype_attrs): no cast, the copy-in is
    all_gather_copy_in's alone, 2p params / n bytes and one launch; when shard != g foreach_reduce casts the
    reduced shard to the parameter's dtype on the reduce-scatter stream (read g, write shard: (g + shard)
    params / n bytes, one launch), counted with the reduce-scatter copy-in.

    >>> from types import SimpleNamespace as N
    >>> gpu = N(hbm_bandwidth=1e12, efficiency=N(hbm_efficiency=1.0, launch_overhead=0.0))
    >>> [round(t * 1e3, 6) for t in fsdp2_copy_times(gpu, 1e9, 8, 2, 4)]   # 10/8, 4, 6 ms
    [1.25, 4.0, 6.0]
    >>> [round(t * 1e3, 6) for t in fsdp2_copy_times(gpu, 1e9, 8, 2, 4, shard=2)]   # 4/8, 4, 6 + 6/8 ms
    [0.5, 4.0, 6.75]
    """
    eff = gpu.efficiency
    bw = gpu.hbm_bandwidth * eff.hbm_efficiency
    launch = eff.launch_overhead
    cast = shard != p
    copy_in = ((shard if cast else 0) + (3 if cast else 2) * p) * params / n / bw + (2 if cast else 1) * launch
    copy_out = 2 * p * params / bw + launch
    rs_copy_in = (2 + g) * params / bw + launch
    if shard != g:
        rs_copy_in += (g + shard) * params / n / bw + launch
    return copy_in, copy_out, rs_copy_in


def zero3_copy_times(stack, plan: Plan, params: float, n: int, p: int, g: int) -> tuple[float, float, float, float]:
    """Seconds a stack's FSDP adds around one parameter group's ZeRO-3 collectives over ``n`` ranks:
    (before the all-gather, on its stream; after the all-gather on the compute stream; before or around
    the reduce-scatter, on its stream; after the unit's backward on the compute stream). FSDP2
    (``fsdp2_copies``, :func:`fsdp2_copy_times`) or FSDP1's FlatParameter (``fsdp1_flat``,
    ``taskgraph/fsdp1_flat.py``); zeros for other stacks and unsharded groups."""
    if stack is None or n <= 1:
        return 0.0, 0.0, 0.0, 0.0
    if stack.fsdp2_copies:
        return fsdp2_copy_times(plan.cluster.gpu, params, n, p, g, optimizer_value_bytes(plan)) + (0.0,)  # the shard's bytes
    if stack.fsdp1_flat:
        gather, cat, reduce = fsdp1_flat_times(plan.cluster.gpu, params, n, p, g, plan.microbatches)
        return gather, 0.0, reduce, cat
    return 0.0, 0.0, 0.0, 0.0


def serial_exchanges(pairs: dict, receiver: dict | None = None) -> dict:
    """Transfer times of a stack whose pipeline exchanges are two blocking calls in a row: each
    boundary's transfer takes both directions' times (with their host gaps), less what the other
    direction's receiver runs after the wire (``receiver``: its re-assembling all-gathers and copies,
    ``taskgraph/pipeline_p2p.py`` receiver_times), which only that receiver waits for.

    DeepSpeed's TrainSchedule (deepspeed/runtime/pipe/schedule.py, 2022) gives every step of a stage
    either [RecvActivation, SendGrad, ForwardPass] or [SendActivation, RecvGrad, BackwardPass], and
    neighbouring stages run opposite steps, so in the steady state the activation and the gradient
    crossing a boundary are the two halves of one exchange; p2p.send / p2p.recv are blocking
    (dist.send / dist.recv, or dist.broadcast on a two-rank group before torch 1.8), so the second
    transfer starts when the first has ended and both ranks wait for both before computing. Megatron-LM
    posts the pair at once (send_forward_recv_backward, batch_isend_irecv): each rank waits for the
    longer transfer only. The warm-up and cool-down steps move one tensor; pricing them as the pair
    over-counts one transfer per warm-up and cool-down step (2 (pp - 1) of 2 (m + pp - 1) steps).

    >>> serial_exchanges({(0, 1): 2.0, (1, 0): 3.0})
    {(0, 1): 5.0, (1, 0): 5.0}
    >>> serial_exchanges({(0, 1): 2.0, (1, 0): 3.0}, {(0, 1): 0.5, (1, 0): 1.0})
    {(0, 1): 4.0, (1, 0): 4.5}
    """
    own = receiver or {}
    return {(a, b): t + pairs.get((b, a), 0.0) - own.get((b, a), 0.0) for (a, b), t in pairs.items()}


def hp_grad_accum_bytes(plan: Plan, stack) -> int:
    """Bytes per weight-gradient element of the stack's unfused fp32 accumulation after each micro-batch's
    backward (0: fused into the GEMM). DeepSpeed's BF16_Optimizer, the optimizer of bf16 runs at ZeRO
    stage 0 or 1 (deepspeed/runtime/pipe/engine.py _exec_reduce_grads, 56c5223: "only bf16 + z1 are
    supported"; ZeRO-2/3 partition the gradients themselves), calls update_hp_grads after every backward
    (engine.py _exec_backward_pass; bf16_optimizer.py backward)."""
    if stack is None or not stack.hp_grad_accum_bytes:
        return 0
    if plan.strategy.training.precision != "bf16" or plan.zero > 1:
        return 0
    return stack.hp_grad_accum_bytes


def unfused_grad_accum(plan: Plan, stack) -> dict:
    """``op_time``'s unfused-accumulation arguments for a run on ``stack``: bytes per weight-gradient
    element and kernels per weight of the accumulation after each micro-batch's backward (0 bytes: fused
    into the weight-gradient GEMM). DeepSpeed's BF16_Optimizer (:func:`hp_grad_accum_bytes`, a cast and
    an add), or a stack whose weight gradients add up in autograd (``Stack.grad_add_bytes``, one add
    kernel): Megatron-LM before gradient_accumulation_fusion (NVIDIA/Megatron-LM 83b1e42, 2022-02-13)
    left it to the local DDP, which at cdde433 (2021-04-09, megatron/model/distributed.py; the default
    --DDP-impl local without --use-contiguous-buffers-in-ddp) lets autograd's AccumulateGrad run
    ``param.grad += new`` for every micro-batch after the first (the optimizer's zero_grad sets the
    gradients to None), and with contiguous buffers its hook runs ``main_grad.add_(grad)`` for every
    one; priced on every micro-batch. Without ZeRO-2/3 (which partition the gradients themselves)."""
    hp = hp_grad_accum_bytes(plan, stack)
    if hp:
        return {"grad_accum_unfused_bytes": hp, "grad_accum_unfused_kernels": HP_GRAD_ACCUM_KERNELS}
    add = stack.grad_add_bytes if stack is not None and plan.zero <= 1 else 0
    return {"grad_accum_unfused_bytes": add, "grad_accum_unfused_kernels": 1}


def op_as_run(plan: Plan, stack, op) -> tuple:
    """(operator, forward seconds, input-gradient seconds) to price for ``op`` as the run executes it:
    PyTorch's ring attention for a torch stack's CP (``taskgraph/torch_cp.py``), Transformer Engine's ring-CP
    kernels for the others' (``options.cp_comm: ring``, ``taskgraph/te_cp.py``), and the routed experts
    behind DeepEP (``options.moe_max_nodes``: Megatron's flex dispatcher, token_dispatcher.py
    _DeepepManager): DeepEP's dispatch takes the tokens and their top-k indices as they are and hands
    each rank its tokens, which one permute groups by local expert (get_permuted_hidden_states_by_experts)
    and one unpermute restores before the combine; the all-to-all dispatcher's chunk sort by local
    expert (sort_chunks_by_idxs, ``operators._moe_ops``) does not run, so half the copies. A stack whose
    cross-entropy is not the fused one (``Stack.cross_entropy``) moves its own bytes per logit
    (``taskgraph/cross_entropy.py``) over the same logits."""
    if op.name == "moe_experts" and op.copy_kernels == 4 and plan.strategy.options.moe_max_nodes:
        return replace(op, copy_bytes=op.copy_bytes // 2, copy_kernels=2), 0.0, 0.0
    if op.kind == "loss":
        run = loss_as_priced(op, stack, plan.strategy.training.precision)
        if run is not op:
            return run, 0.0, 0.0
    if stack is None or not stack.torch_cp:
        return (op, *te_ring_attention(plan, stack, op, DTYPE_BYTES[plan.strategy.training.precision]))
    return torch_ring_attention(plan, stack, op)


def loss_as_priced(op, stack, precision: str):
    """The loss operator ``op`` as ``stack`` runs it (None: the default stack's loss), its logits in
    ``precision``'s bytes as costing builds the head: :func:`loss_as_run` with the stack's
    ``cross_entropy``; ``op`` itself for the fused loss."""
    ce = (stack if stack is not None else get_stack(None)).cross_entropy
    return loss_as_run(op, DTYPE_BYTES[precision], ce)


def loss_as_run(op, dt: int, impl: str):
    """The loss operator ``op`` (built with the fused bytes, ``operators.head_operators``) moving
    ``impl``'s bytes per logit (``taskgraph/cross_entropy.py``) over the same logits; ``op`` itself for
    'fused'. A profile row still names it by the built operator's shape (what ``execsim profile`` and
    ``calibrate`` write)."""
    if impl == "fused":
        return op
    fused, own = cross_entropy_bytes(dt), cross_entropy_bytes(dt, impl)
    logits = op.fwd_bytes // fused[0]
    return replace(op, fwd_bytes=logits * own[0], bwd_input_bytes=logits * own[1], profile_shape=op_shape_key(op))


def reduce_kind(plan: Plan) -> str:
    """The collective that reduces the data-parallel gradients of ZeRO 1-3: a reduce-scatter (Megatron's
    distributed optimizer, PyTorch FSDP, DeepSpeed ZeRO-2/3), except under DeepSpeed's BF16_Optimizer
    (the stack's unfused accumulation applies: bf16 at ZeRO 0/1), whose ZeRO-1 all-reduces the fp32
    gradients whole and then steps its 1/dp partition (deepspeed/runtime/pipe/engine.py
    _bf16_reduce_grads, 56c5223: buffered_allreduce_fallback over get_grads_for_reduction(), the fp32
    flat groups; bf16_optimizer.py step then all_gather_dp_groups of the bf16 partitions).

    Callers with ZeRO 0 all-reduce already."""
    name = plan.strategy.options.stack
    if name in (None, DEFAULT_STACK):
        return "reduce-scatter"
    return "all-reduce" if hp_grad_accum_bytes(plan, get_stack(name)) else "reduce-scatter"
