"""The strategy file: model + cluster + parallel strategy + schedule + training settings.

YAML (JSON accepted). Top-level sections (``model`` and ``cluster`` are resolved by
``taskgraph.plan.resolve``, which also runs the checks that need the model or the world size)::

    model: gpt3-175b                   # preset name, a path (model YAML or HF config.json), or a mapping
    cluster: {preset: dgx-a100-80g, nodes: 128}   # or a path to a topology YAML, or a mapping
    parallel: {tp: 8, pp: 8, dp: 16, vpp: 2, sp: true, cp: 1, ep: 1, zero: 1}
    schedule: interleaved-1f1b         # or {name: custom, csv: my_schedule.csv}
    training: {micro_batch: 1, global_batch: 1536, seq_len: 2048, precision: bf16, recompute: selective}
    options: {overlap_grad_reduce: true, overlap_param_gather: true}

This module checks structure, types, ranges and unknown keys (with a did-you-mean). It imports
nothing outside ``strategies/``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strategies.config import check_keys, did_you_mean, get_bool, get_float, get_int, get_str, load_mapping
from strategies.errors import ConfigError, brief
from strategies.fitted import fitted_value
from strategies.limits import MAX_GPUS, MAX_LAYERS, MAX_SEQ_LEN
from strategies.lora_spec import LoraSpec, parse_lora
from strategies.optimizer_dtypes import OptimizerDtypes, check_optimizer_dtypes, parse_optimizer_dtypes

TOP_KEYS = ("model", "cluster", "parallel", "schedule", "training", "options", "goodput")
PARALLEL_KEYS = ("tp", "pp", "dp", "vpp", "sp", "cp", "ep", "zero", "layers_per_stage", "dp_shard", "etp", "order")
TRAINING_KEYS = ("micro_batch", "global_batch", "seq_len", "precision", "recompute", "train_tokens", "master_weights",
                 "recompute_layers", "lora")
OPTION_KEYS = ("overlap_grad_reduce", "overlap_param_gather", "grad_bucket_mb", "flash_attention",
               "overlap_handoff", "memory_reserve_gb", "fidelity", "profile", "profile_gpu", "collective_profile", "collective_profile_gpu", "fp32_grad_accum",
               "tp_comm_overlap", "p2p_overlap", "tp_async_backward", "p2p_host_gap_us", "pipeline_scatter_gather", "moe_imbalance", "moe_routing", "moe_capacity_factor",
               "moe_max_nodes", "moe_dispatcher", "pair_overlap", "pair_comm_sms", "overlap_moe_expert_parallel_comm",
               "delay_wgrad_compute", "moe_flex_dispatcher_num_sms", "moe_shared_expert_overlap", "optimizer_cpu_offload",
               "optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d", "optimizer_dtypes", "fp8_recipe", "fp8_param_gather",
               "fp4_recipe", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16",
               "activation_offload_layers", "overlap_interference", "stack", "attention_kernel",
               "cross_entropy", "cp_comm", "cp_load_balance", "reshard_after_forward",
               "price_per_gpu_hour_usd", "cuda_graphs")
SCHEDULE_KEYS = ("name", "csv")
PRECISIONS = ("bf16", "fp16", "fp8", "fp4")
#: FP4 training recipes (options.fp4_recipe); their costs: taskgraph/cost.py NVFP4_QUANT_BYTES
FP4_RECIPES = ("nvfp4",)
#: FP8 scaling recipes (options.fp8_recipe); their costs: taskgraph/cost.py FP8_RECIPE_COSTS
FP8_RECIPES = ("tensorwise", "delayed", "rowwise", "blockwise", "mxfp8")
RECOMPUTE = ("none", "selective", "full")
FIDELITIES = ("operator", "coarse")
#: options.moe_routing values (taskgraph/moe_routing.py; 'learned' picks aux_loss_free or aux_loss by the model)
MOE_ROUTINGS = ("learned", "aux_loss", "aux_loss_free", "random", "balanced")
#: options.moe_dispatcher values (their collectives: taskgraph/moe_dispatchers.py MOE_DISPATCHERS)
MOE_DISPATCHERS = ("alltoall", "allgather", "allgather_allreduce")
#: options.cuda_graphs values (what each captures: taskgraph/cuda_graphs.py)
CUDA_GRAPHS = ("none", "layers", "full_iteration")


@dataclass(frozen=True)
class MoeRouting:
    """The busiest expert-parallel rank's load left to the routing (``options.moe_routing``): the
    operator builder resolves it with the layer's experts, top-k, ep and tokens per micro-batch, then
    caps it at ``capacity_factor`` (tokens past capacity dropped; None = dropless)."""

    routing: str
    capacity_factor: float | None = None
#: Host gap after each blocking pipeline exchange, microseconds: fitted on the pairs of runs that differ
#: only in their number of exchanges (Qi 2024's 1F1B / ZB pairs and Narayanan 2021 Figure 12's), the fit
#: and its history in topologies/data/fitted.yaml; docs/validation.md.
P2P_HOST_GAP_US = float(fitted_value("p2p_host_gap_us"))
_GPUS_WHY = " GPUs (docs/strategy-file.md, Limits)"


_AXES4 = ("tp", "cp", "dp", "pp")


def _parse_order(value: Any) -> tuple[str, ...]:
    """``parallel.order``: 'tp-cp-pp-dp' or [tp, cp, pp, dp], fastest-varying axis first."""
    if value is None:
        return _AXES4
    parts = value.split("-") if isinstance(value, str) else value
    if (not isinstance(parts, (list, tuple)) or sorted(map(str, parts)) != sorted(_AXES4)
            or not all(isinstance(x, str) for x in parts)):
        raise ConfigError(f"parallel.order = {brief(value)} must name tp, cp, dp and pp once each, fastest first, "
                          f"e.g. 'tp-cp-pp-dp' (Llama 3, DP outermost) or 'tp-cp-dp-pp' (Megatron, the default)")
    return tuple(parts)


@dataclass(frozen=True)
class ParallelSpec:
    """Parallel sizes.

    tp, pp, cp, ep: tensor, pipeline, context, expert parallel sizes.
    dp: data-parallel size; None = derived from the world size (num_gpus / (tp*pp*cp)).
    vpp: chunks (virtual stages) per pipeline rank.
    sp: Megatron sequence parallelism (needs tp > 1 to matter).
    zero: ZeRO stage 0..3 (1 = distributed optimizer: optimizer states sharded over dp; 3 = FSDP).
    layers_per_stage: explicit transformer layers per virtual stage (len pp*vpp), or None = even split.
    dp_shard: HSDP / partial sharding: ZeRO shards over groups of dp_shard data-parallel ranks and
        replicates across dp*cp / dp_shard such groups (PyTorch HSDP; torchtitan
        data_parallel_shard_degree; Megatron --num-distributed-optimizer-instances); None = all dp*cp.
    etp: expert tensor parallel size (Megatron MoE parallel folding, --expert-tensor-parallel-size):
        the expert layers use their own mesh etp x ep x edp over the same tp*cp*dp GPUs of a pipeline
        stage, with edp = tp*cp*dp / (etp*ep); None = tp (Megatron's default). With etp != tp, ep may
        exceed dp (e.g. tp 2, ep 32 on 256 GPUs with pp 8).
    order: rank order of the mesh, fastest-varying axis first: Megatron's ``("tp", "cp", "dp", "pp")``
        (the default) or another permutation, e.g. Llama 3's [TP, CP, PP, DP] (Dubey et al. 2024,
        Section 3.3.2) ``("tp", "cp", "pp", "dp")``, which puts the DP groups across the whole job.
    """

    tp: int = 1
    pp: int = 1
    dp: int | None = None
    vpp: int = 1
    sp: bool = False
    cp: int = 1
    ep: int = 1
    zero: int = 0
    layers_per_stage: tuple[int, ...] | None = None
    dp_shard: int | None = None
    etp: int | None = None
    order: tuple[str, ...] = _AXES4


@dataclass(frozen=True)
class TrainingSpec:
    """Training settings.

    micro_batch: sequences per microbatch. global_batch: sequences per optimizer step.
    seq_len: tokens per sequence. precision: bf16 | fp16 | fp8 | fp4 (GEMM math; fp4 needs FP4 tensor
        cores: Blackwell).
    master_weights: the optimizer keeps fp32 master weights (fp32 moments, fp32 shards under PyTorch FSDP);
        False: parameters, gradients and Adam moments stay bf16 (PyTorch FSDP2 stacks only: NeMo AutoModel's
        default, torch_dtype bf16); None: the stack's default (stacks.yaml ``master_weights``).
    recompute: none | selective | full activation recomputation (Korthikanti 2022).
    recompute_layers: per-layer override (list of none/selective/full, one per transformer layer), or None.
    train_tokens: token budget for the time-to-train report (None: not reported).
    lora: LoRA fine-tuning (strategies/lora_spec.py; taskgraph/lora.py), or None: full training.
    """

    micro_batch: int = 1
    global_batch: int = 1
    seq_len: int = 2048
    precision: str = "bf16"
    recompute: str = "none"
    recompute_layers: tuple[str, ...] | None = None
    train_tokens: float | None = None
    lora: LoraSpec | None = None
    master_weights: bool | None = None


@dataclass(frozen=True)
class OptionsSpec:
    """Execution options.

    overlap_grad_reduce: DP gradient reduction overlapped with backward (bucketed) vs after it.
    overlap_param_gather: distributed-optimizer / ZeRO-3 parameter all-gather overlapped with forward.
    grad_bucket_mb: DP gradient bucket size, MB of gradients; None = Megatron's max(40M, 1M x dp) parameters.
    flash_attention: attention core is FlashAttention (no s^2 attention matrix stored).
    overlap_handoff: DualPipe overlapped F&B pairs release outputs at 'pair-end' or 'each' half's end.
    memory_reserve_gb: memory per GPU not available to the model (CUDA context, fragmentation), GB.
    fidelity: 'operator' (a task per operator) or 'coarse' (a task per chunk, microbatch and pass).
    profile: path of a measured-time profile CSV that overrides the roofline, or None.
    profile_gpu: apply the profile's rows measured on this GPU (its ``gpu`` column, e.g. ``cpu``) to
        the cluster's GPU, times unchanged; None = only rows of the cluster's own GPU (a profile of
        another GPU is then an error naming both).
    collective_profile: path of a measured collective CSV (``execsim profile --collectives``) whose
        times override the collective model for groups inside one node, or None
        (``topologies/collective_profile.py``).
    collective_profile_gpu: the same rule as ``profile_gpu`` for ``collective_profile``.
    fp32_grad_accum: keep an fp32 gradient accumulation buffer (Megatron default with bf16).
    tp_comm_overlap: sequence-parallel TP all-gathers and reduce-scatters run chunk by chunk with
        their GEMM (Megatron --tp-comm-overlap: Transformer Engine userbuffers; taskgraph/overlap.py),
        else they block.
    overlap_interference: communication that runs beside compute holds its kernels' SMs (NCCL one per
        channel, userbuffers / DeepEP their configured SMs), so the compute beside it is slower
        (taskgraph/overlap.py), and the DP collectives share HBM with that compute, so they are
        slower too; False = overlap is free (the pre-2025 model, for comparison).
    stack: the software stack that runs the graph (taskgraph/data/stacks.yaml): 'megatron-te'
        (Megatron-LM + Transformer Engine, what the GPU catalog describes), 'torchtitan' (PyTorch
        eager: FlexAttention, unfused norms and activations), 'torchtitan-compile'
        (torch.compile fuses them back), 'deepspeed', 'llm-foundry' (Triton attention, Composer's metrics); None =
        megatron-te.
    cuda_graphs: CUDA graph capture (taskgraph/cuda_graphs.py): 'none' (default), 'layers' (Megatron-LM
        --cuda-graph-impl local / transformer_engine: each transformer layer's forward and backward
        replayed as graphs; a dropless MoE layer's experts stay outside), 'full_iteration'
        (--cuda-graph-impl full_iteration: the whole forward-backward of a step, the optimizer outside).
        Megatron-LM + Transformer Engine (stack megatron-te) only.
    attention_kernel: the attention kernel the run prices in place of its stack's own (a kernel of
        stacks.yaml attention_kernels -- fa2, fa3, cudnn, flex, varlen, triton -- or 'sdpa': what PyTorch's
        SDPA runs under torchtitan's backend order, or 'catalog': the GPU catalog's figure); None = the
        stack's choice. Checked by resolve (taskgraph/stacks.py run_stack).
    cross_entropy: how the vocab-parallel loss runs, in place of its stack's own (taskgraph/cross_entropy.py):
        'fused' (one kernel per pass), 'eager-fp32' (Megatron's eager ops over an fp32 copy: Megatron-core
        without --cross-entropy-loss-fusion), 'native' (--cross-entropy-loss-fusion, impl native), 'te'
        (--cross-entropy-fusion-impl te); None = the stack's. Checked by resolve (taskgraph/stacks.py run_stack).
    tp_async_backward: the column-parallel layers' backward collectives run concurrently with their
        GEMMs (Megatron-LM's asynchronous TP all-reduce / SP all-gather and reduce-scatter, on by
        default since late 2021); False = every TP collective blocks (Megatron-LM of early 2021).
    p2p_overlap: pipeline send/recv overlaps the sender's compute; False = Megatron-LM's default
        blocking p2p (``overlap_p2p_comm`` off): the sender's next action waits for its send.
    p2p_host_gap_us: with blocking p2p, microseconds both sides' GPUs idle after each exchange:
        Megatron synchronizes the device after every batched send/recv (``batch_p2p_sync``), so the
        next action starts only once the host has launched its first kernel again.
    pipeline_scatter_gather: without sequence parallelism, each TP rank sends 1/tp of a pipeline
        activation and the receiving TP group all-gathers it (Megatron-LM 2021-2022's
        ``--scatter-gather-tensors-in-pipeline``, DeepSpeed's partitioned pipeline activations);
        False = every TP rank sends the whole activation (Megatron-core). Refused with sp, tp 1 or pp 1
        (taskgraph/pipeline_p2p.py).
    moe_imbalance: MoE routing skew: tokens routed to the busiest expert-parallel rank over the
        mean (>= 1; 1 = perfectly balanced). The busiest rank sets the pace of the EP group's
        all-to-all and of the layer (GShard, Lepikhin 2020 Section 2.2; measured expert loads in
        DeepSeek-V3 Section 4.5 / Mixtral Section 5). None = the expected load of ``moe_routing``.
    moe_routing: how tokens are routed when moe_imbalance is not given, which sets the busiest
        rank's expected load (taskgraph/moe_routing.py): 'learned' (default: 'aux_loss_free' for a
        model with a router bias, else 'aux_loss'), 'aux_loss' (a router trained with a load-balancing
        loss; Wang et al. 2024 Table 2), 'aux_loss_free' (DeepSeek-V3's expert bias), 'random'
        (Megatron --moe-router-force-load-balancing: random logits) or 'balanced' (torchtitan
        debug.moe_force_load_balance: round-robin, exactly the mean).
    moe_capacity_factor: expert capacity as a multiple of the mean load (Switch Transformer, Fedus
        2021 Section 2.2; Megatron --moe-expert-capacity-factor); tokens past it are dropped, so the
        busiest rank processes min(imbalance, factor) x mean. None = dropless (MegaBlocks, Gale 2023).
    moe_max_nodes: node-limited routing (DeepSeek-V3 Section 2.1.2): each token reaches experts on at
        most this many nodes and crosses the network once per destination node, then NVLink inside it
        (Section 3.2.2; DeepEP); None = Megatron's all-to-all, every routed copy sent to its GPU.
    moe_dispatcher: the MoE token dispatcher (taskgraph/moe_dispatchers.py): 'alltoall' (default;
        Megatron MoEAlltoAllTokenDispatcher, or DeepEP with moe_max_nodes), 'allgather' (Megatron
        --moe-token-dispatcher-type allgather: all-gather of the expert-TP x EP group's tokens, routing
        map and probs, reduce-scatter of the output), 'allgather_allreduce' (NeMo AutoModel's
        dispatcher: torch: all-gather over EP, fp32 all-reduce of the output). Megatron refuses
        allgather with overlap_moe_expert_parallel_comm and moe_shared_expert_overlap.
    pair_overlap: DualPipe overlapped F&B pairs: 'serial' (the two halves run one after the other, as
        PyTorch's ScheduleDualPipeV lowers OVERLAP_F_B without a custom callback) or 'concurrent'
        (DeepSeek-V3 Section 3.2.1: the halves' kernels interleave so that one half's all-to-all and
        pipeline communication hide behind the other's computation, on SMs minus pair_comm_sms).
    pair_comm_sms: SMs the communication kernels hold during concurrent pairs (DeepSeek-V3 Section
        3.2.1: 20 of the H800's 132); compute of a paired action runs at (SMs - this) / SMs.
    overlap_moe_expert_parallel_comm: Megatron-LM --overlap-moe-expert-parallel-comm (1F1B and
        interleaved 1F1B only): one more warm-up forward per rank, then every steady-state forward
        runs merged with the next backward as one combined step whose halves interleave on the
        compute and expert-all-to-all streams (megatron/core/pipeline_parallel/schedules.py
        get_pp_rank_microbatches, combined_1f1b.py; strategies/schedules_combined.py).
    delay_wgrad_compute: Megatron-LM --delay-wgrad-compute (needs the overlap above): a backward's
        weight-gradient GEMMs leave the chain, so the collective after an input-gradient GEMM starts
        at once and the weight gradient fills the gap (model_chunk_schedule_plan.py
        TransformerLayerSchedulePlan.run, mlp.backward_dw).
    moe_flex_dispatcher_num_sms: SMs the expert dispatch / combine kernels hold while they run beside
        compute with the overlap above (Megatron --moe-flex-dispatcher-num-sms, formerly
        --moe-deepep-num-sms); None = DeepEP's setting in topologies/data/comm_kernels.yaml (24).
    moe_shared_expert_overlap: Megatron-LM --moe-shared-expert-overlap: an MoE layer's shared experts
        run on their own stream beside the token dispatcher's all-to-alls, fc1 + activation beside the
        dispatch and fc2 beside the combine, the backward mirrored (shared_experts.py SharedExpertMLP,
        token_dispatcher.py MoEAlltoAllTokenDispatcher; taskgraph/work.py shared_pair). Needs
        shared experts; Megatron refuses it with overlap_moe_expert_parallel_comm.
    optimizer_cpu_offload: Megatron-LM --optimizer-cpu-offload (HybridDeviceOptimizer,
        megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py): the optimizer states (fp32 master
        weights, Adam moments) of optimizer_offload_fraction of the parameters live in host memory and
        their Adam step runs on the CPU; gradients go to the host and updated weights come back over
        the host link (taskgraph/costing.py cpu_optimizer_time).
    optimizer_offload_fraction: the share of the parameters (by count) whose optimizer runs on the CPU,
        in [0, 1] (Megatron --optimizer-offload-fraction; its default 0.0 offloads nothing).
    overlap_cpu_optimizer_d2h_h2d: Megatron --overlap-cpu-optimizer-d2h-h2d: one CPU optimizer per
        parameter tensor, the gradient copies, CPU steps and weight copies pipelined over the tensors
        on their own streams; false = all gradients to the host, then the CPU step, then the weights back.
    fp8_recipe: with precision fp8, one of FP8_RECIPES (taskgraph/cost.py FP8 recipe table):
        'tensorwise' / 'delayed' (Transformer Engine per-tensor scaling: current / delayed), 'rowwise'
        (torchao per-row scaling), 'blockwise' (DeepSeek-V3 Section 3.3: 1x128 activation tiles,
        128x128 weight blocks, online quantization kernels, BF16 embedding / output head) or 'mxfp8'
        (OCP MX v1.0 32-element blocks with E8M0 scales; Blackwell).
    fp4_recipe: with precision fp4, one of FP4_RECIPES (None: 'nvfp4', the only one): 'nvfp4' (NVIDIA, "Pretraining Large Language
        Models with NVFP4", arXiv 2509.25149; Transformer Engine NVFP4BlockScaling): linear-layer GEMMs
        in NVFP4 (16-element E2M1 blocks, E4M3 block scales, an FP32 tensor scale), random Hadamard
        transforms on wgrad inputs, stochastic rounding of gradients, 2D 16x16 weight blocks; attention,
        norms, embedding and output head in BF16.
    num_layers_at_start_in_bf16, num_layers_at_end_in_bf16: with precision fp8 or fp4, transformer
        layers at the start / end of the model whose GEMMs stay BF16 (Megatron --first-last-layers-bf16
        --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16). None: 0 with fp8; with fp4 the
        NVFP4 paper's share (taskgraph/costing.py bf16_layers).
    fp8_param_gather: parameters kept in FP8 (Megatron --fp8-param-gather; torchao
        enable_fsdp_float8_all_gather): 1-byte weights on the GPU and a 1-byte parameter all-gather.
    cp_comm: context-parallel attention: 'allgather' K/V (Llama 3), 'ring' p2p overlapped with the
        attention chunks (Ring Attention; Megatron/TE "p2p"), 'a2a' Ulysses all-to-all over heads.
    cp_load_balance: causal load balancing over CP ranks (Megatron's zig-zag chunks); False = the
        rank holding the last queries does (2cp-1)/cp of the balanced attention work and sets the pace.
    reshard_after_forward: ZeRO-3 / FSDP frees gathered parameters after each layer's forward and
        gathers them again for backward (True), or keeps a stage's gathered parameters through all
        its microbatches (False, as Llama 3 trained); None = torchtitan's default: False with
        pipeline parallelism, True without (torchtitan fsdp_reshard_after_forward = "default").
    price_per_gpu_hour_usd: rental price, US dollars per GPU-hour, for the cost reports; None = the
        GPU's price in topologies/data/prices.yaml.
    """

    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    grad_bucket_mb: float | None = None
    flash_attention: bool = True
    overlap_handoff: str = "pair-end"
    memory_reserve_gb: float = 2.0
    fidelity: str = "operator"
    profile: str | None = None
    profile_gpu: str | None = None
    collective_profile: str | None = None
    collective_profile_gpu: str | None = None
    fp32_grad_accum: bool = True
    tp_comm_overlap: bool = False
    p2p_overlap: bool = False
    tp_async_backward: bool = True
    p2p_host_gap_us: float = P2P_HOST_GAP_US
    pipeline_scatter_gather: bool = False
    moe_imbalance: float | None = None
    moe_routing: str = "learned"
    moe_capacity_factor: float | None = None
    moe_max_nodes: int | None = None
    moe_dispatcher: str = "alltoall"
    pair_overlap: str = "serial"
    pair_comm_sms: int = 20
    overlap_moe_expert_parallel_comm: bool = False
    delay_wgrad_compute: bool = False
    moe_flex_dispatcher_num_sms: int | None = None
    moe_shared_expert_overlap: bool = False
    optimizer_cpu_offload: bool = False
    optimizer_offload_fraction: float = 1.0
    overlap_cpu_optimizer_d2h_h2d: bool = False
    optimizer_dtypes: OptimizerDtypes | None = None  # precision-aware optimizer (strategies/optimizer_dtypes.py)
    fp8_recipe: str = "tensorwise"
    fp8_param_gather: bool = False
    fp4_recipe: str | None = None
    num_layers_at_start_in_bf16: int | None = None
    num_layers_at_end_in_bf16: int | None = None
    activation_offload_layers: int = 0
    cp_comm: str = "allgather"
    cp_load_balance: bool = True
    reshard_after_forward: bool | None = None
    overlap_interference: bool = True
    stack: str | None = None
    attention_kernel: str | None = None
    cuda_graphs: str = "none"
    cross_entropy: str | None = None

    @property
    def moe_load(self) -> float | MoeRouting:
        """Load of the busiest expert-parallel rank relative to the mean (see moe_imbalance), or, without
        moe_imbalance, the routing whose expected load the operator builder derives from the layer's
        shape (taskgraph/operators.py, taskgraph/moe_routing.py)."""
        if self.moe_imbalance is None:
            return MoeRouting(self.moe_routing, self.moe_capacity_factor)
        if self.moe_capacity_factor is None:
            return self.moe_imbalance
        return min(self.moe_imbalance, self.moe_capacity_factor)
    price_per_gpu_hour_usd: float | None = None


@dataclass(frozen=True)
class Strategy:
    """A parsed strategy file. ``model`` / ``cluster`` stay unresolved (name, path or mapping)."""

    model: Any
    cluster: Any
    parallel: ParallelSpec
    schedule: str
    schedule_csv: str | None
    training: TrainingSpec
    options: OptionsSpec
    base_dir: str = "."
    raw: dict = field(default_factory=dict, compare=False, hash=False, repr=False)


def _csv_path(o: dict, key: str, base_dir) -> str | None:
    """``options.<key>``: the path of a CSV, relative to the strategy file's folder, or None."""
    v = o.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v:
        raise ConfigError(f"options.{key} = {brief(v)} must be the path of a {key.replace('_', ' ')} CSV")
    return str(Path(base_dir) / v) if not Path(v).is_absolute() else v


def _section(data: dict, key: str, keys: tuple[str, ...]) -> dict:
    d = data.get(key, {})
    if d is None:
        d = {}
    if not isinstance(d, dict):
        raise ConfigError(f"{key} must be a mapping (keys: {', '.join(keys)}), got {brief(d)}")
    check_keys(d, keys, key)
    return d


def parse_strategy(data: dict, base_dir: str | Path = ".", *, written: bool = True) -> Strategy:
    """Check a strategy mapping and return a :class:`Strategy`.

    ``written``: ``data`` is what a user wrote (a file, ``--set``), so a setting given where it does
    not apply is refused too (:func:`_check_applies`); False for a mapping rebuilt from a
    :class:`Strategy` with every field filled in (:func:`check_strategy`).

    The sections are read in the order their errors are raised: ``parallel``
    (:func:`_parallel_spec`), ``schedule`` (:func:`_schedule_field`), ``training``
    (:func:`_training_spec`), ``options`` (:func:`_options_spec`)."""
    check_keys(data, TOP_KEYS, "")
    if "goodput" in data:  # a whole run with failures (execsim goodput); schema in strategies/goodput_file.py
        from strategies.goodput_file import parse_goodput
        parse_goodput(data["goodput"])
    for req in ("model", "cluster"):
        if req not in data or data[req] in (None, ""):
            raise ConfigError(f"missing required section {req!r}: give a preset name, a file path or a mapping")
    for req in ("model", "cluster"):
        if not isinstance(data[req], (str, dict)):
            raise ConfigError(f"{req} = {brief(data[req])} must be a preset name, a file path or a mapping")

    par = _parallel_spec(data)
    sched, csv = _schedule_field(data, par, base_dir)
    t, tr = _training_spec(data)
    o, opt = _options_spec(data, base_dir)
    if written:
        _check_applies(t, o, par, tr, opt)
    return Strategy(data["model"], data["cluster"], par, sched, csv, tr, opt, str(base_dir), data)


def _parallel_spec(data: dict) -> ParallelSpec:
    """The ``parallel`` section."""
    p = _section(data, "parallel", PARALLEL_KEYS)
    dp = p.get("dp")
    if dp is not None:
        dp = get_int(p, "dp", "parallel", minimum=1, maximum=MAX_GPUS, why=_GPUS_WHY)
    lps = p.get("layers_per_stage")
    if lps is not None:
        if not isinstance(lps, list) or not lps or not all(isinstance(x, int) and not isinstance(x, bool)
                                                          and x >= 0 for x in lps):
            raise ConfigError(f"parallel.layers_per_stage = {brief(lps)} must be a list of non-negative integers, "
                              f"one per pipeline stage (pp*vpp values)")
        lps = tuple(lps)
    par = ParallelSpec(
        tp=get_int(p, "tp", "parallel", default=1, minimum=1, maximum=MAX_GPUS, why=_GPUS_WHY),
        pp=get_int(p, "pp", "parallel", default=1, minimum=1, maximum=MAX_GPUS, why=_GPUS_WHY),
        dp=dp,
        vpp=get_int(p, "vpp", "parallel", default=1, minimum=1, maximum=MAX_GPUS, why=_GPUS_WHY),
        sp=get_bool(p, "sp", "parallel", default=False),
        cp=get_int(p, "cp", "parallel", default=1, minimum=1, maximum=MAX_GPUS, why=_GPUS_WHY),
        ep=get_int(p, "ep", "parallel", default=1, minimum=1, maximum=MAX_GPUS, why=_GPUS_WHY),
        zero=get_int(p, "zero", "parallel", default=0, minimum=0),
        layers_per_stage=lps,
        dp_shard=None if p.get("dp_shard") is None else get_int(p, "dp_shard", "parallel", minimum=1),
        etp=None if p.get("etp") is None else get_int(p, "etp", "parallel", minimum=1, maximum=MAX_GPUS, why=_GPUS_WHY),
        order=_parse_order(p.get("order")),
    )
    if par.zero > 3:
        raise ConfigError(f"parallel.zero = {par.zero} must be 0, 1, 2 or 3")
    if par.dp_shard is not None and par.zero == 0:
        raise ConfigError(f"parallel.dp_shard = {par.dp_shard} shards ZeRO states, but parallel.zero = 0; set zero "
                          f">= 1 (3 for HSDP) or drop dp_shard")
    return par


def _schedule_field(data: dict, par: ParallelSpec, base_dir: str | Path) -> tuple[str, str | None]:
    """The ``schedule`` field: its name and the path of a custom schedule's CSV (or None)."""
    sched = data.get("schedule", "1f1b" if par.vpp == 1 else "interleaved-1f1b")
    csv = None
    if isinstance(sched, dict):
        check_keys(sched, SCHEDULE_KEYS, "schedule")
        name = get_str(sched, "name", "schedule")
        csv = sched.get("csv")
        if csv is not None and not isinstance(csv, str):
            raise ConfigError(f"schedule.csv = {brief(csv)} must be the path of a PyTorch action CSV")
        if name == "custom" and not isinstance(csv, str):
            raise ConfigError("schedule.name = 'custom' needs schedule.csv: the path of a PyTorch action CSV")
        if csv is not None and name != "custom":
            raise ConfigError(f"schedule.csv is set but schedule.name = {brief(name)}: use name: custom")
        if csv is not None:
            csv = str(Path(base_dir) / csv) if not Path(csv).is_absolute() else csv
        sched = name
    elif not isinstance(sched, str):
        raise ConfigError(f"schedule = {brief(sched)} must be a schedule name or {{name: custom, csv: FILE}}")
    elif sched == "custom":
        raise ConfigError("schedule = 'custom' needs its CSV: write schedule: {name: custom, csv: FILE}")
    return sched, csv


def _training_spec(data: dict) -> tuple[dict, TrainingSpec]:
    """The ``training`` section as written and as a :class:`TrainingSpec`."""
    t = _section(data, "training", TRAINING_KEYS)
    rl = t.get("recompute_layers")
    if rl is not None:
        if not isinstance(rl, list) or not all(isinstance(x, str) and x in RECOMPUTE for x in rl):
            raise ConfigError(f"training.recompute_layers = {brief(rl)} must be a list with one of "
                              f"{', '.join(RECOMPUTE)} per transformer layer")
        rl = tuple(rl)
    tt = t.get("train_tokens")
    if tt is not None:
        tt = get_float(t, "train_tokens", "training", positive=True)
    tr = TrainingSpec(
        micro_batch=get_int(t, "micro_batch", "training", default=1, minimum=1),
        global_batch=get_int(t, "global_batch", "training", minimum=1),
        seq_len=get_int(t, "seq_len", "training", default=2048, minimum=1, maximum=MAX_SEQ_LEN,
                        why=" tokens (float64 FLOP counts stay exact below it; docs/strategy-file.md, Limits)"),
        precision=get_str(t, "precision", "training", default="bf16", choices=PRECISIONS),
        recompute=get_str(t, "recompute", "training", default="none", choices=RECOMPUTE),
        recompute_layers=rl,
        train_tokens=tt,
        lora=parse_lora(t.get("lora")),
        master_weights=None if t.get("master_weights") is None else get_bool(t, "master_weights", "training"),
    )
    return t, tr


def _options_spec(data: dict, base_dir: str | Path) -> tuple[dict, OptionsSpec]:
    """The ``options`` section as written and as an :class:`OptionsSpec`."""
    o = _section(data, "options", OPTION_KEYS)
    prof, cprof = (_csv_path(o, key, base_dir) for key in ("profile", "collective_profile"))
    opt = OptionsSpec(
        overlap_grad_reduce=get_bool(o, "overlap_grad_reduce", "options", default=True),
        overlap_param_gather=get_bool(o, "overlap_param_gather", "options", default=True),
        grad_bucket_mb=get_float(o, "grad_bucket_mb", "options", default=None, positive=True),
        flash_attention=get_bool(o, "flash_attention", "options", default=True),
        overlap_handoff=get_str(o, "overlap_handoff", "options", default="pair-end", choices=("pair-end", "each")),
        memory_reserve_gb=get_float(o, "memory_reserve_gb", "options", default=2.0),
        fidelity=get_str(o, "fidelity", "options", default="operator", choices=FIDELITIES),
        profile=prof,
        profile_gpu=None if o.get("profile_gpu") is None else get_str(o, "profile_gpu", "options"),
        collective_profile=cprof,
        collective_profile_gpu=None if o.get("collective_profile_gpu") is None else get_str(o, "collective_profile_gpu", "options"),
        fp32_grad_accum=get_bool(o, "fp32_grad_accum", "options", default=True),
        tp_comm_overlap=get_bool(o, "tp_comm_overlap", "options", default=False),
        overlap_interference=get_bool(o, "overlap_interference", "options", default=True),
        stack=None if o.get("stack") is None else get_str(o, "stack", "options"),  # checked by resolve
        attention_kernel=None if o.get("attention_kernel") is None else get_str(o, "attention_kernel", "options"),
        cross_entropy=None if o.get("cross_entropy") is None else get_str(o, "cross_entropy", "options"),  # resolve checks
        p2p_overlap=get_bool(o, "p2p_overlap", "options", default=False),
        tp_async_backward=get_bool(o, "tp_async_backward", "options", default=True),
        p2p_host_gap_us=get_float(o, "p2p_host_gap_us", "options", default=P2P_HOST_GAP_US),
        pipeline_scatter_gather=get_bool(o, "pipeline_scatter_gather", "options", default=False),
        moe_imbalance=None if o.get("moe_imbalance") is None else get_float(o, "moe_imbalance", "options",
                                                                             minimum=1.0),
        moe_routing=get_str(o, "moe_routing", "options", default="learned", choices=MOE_ROUTINGS),
        moe_capacity_factor=None if o.get("moe_capacity_factor") is None else get_float(
            o, "moe_capacity_factor", "options", minimum=1.0),
        moe_max_nodes=None if o.get("moe_max_nodes") is None else get_int(
            o, "moe_max_nodes", "options", minimum=1, maximum=4096,
            why=" (nodes a token's experts may span; DeepSeek-V3 uses 4)"),
        moe_dispatcher=get_str(o, "moe_dispatcher", "options", default="alltoall", choices=MOE_DISPATCHERS),
        pair_overlap=get_str(o, "pair_overlap", "options", default="serial", choices=("serial", "concurrent")),
        pair_comm_sms=get_int(o, "pair_comm_sms", "options", default=20, minimum=0, maximum=1024),
        overlap_moe_expert_parallel_comm=get_bool(o, "overlap_moe_expert_parallel_comm", "options", default=False),
        delay_wgrad_compute=get_bool(o, "delay_wgrad_compute", "options", default=False),
        moe_flex_dispatcher_num_sms=None if o.get("moe_flex_dispatcher_num_sms") is None else get_int(
            o, "moe_flex_dispatcher_num_sms", "options", minimum=0, maximum=1024),
        moe_shared_expert_overlap=get_bool(o, "moe_shared_expert_overlap", "options", default=False),
        optimizer_cpu_offload=get_bool(o, "optimizer_cpu_offload", "options", default=False),
        optimizer_offload_fraction=get_float(o, "optimizer_offload_fraction", "options", default=1.0, minimum=0.0),
        overlap_cpu_optimizer_d2h_h2d=get_bool(o, "overlap_cpu_optimizer_d2h_h2d", "options", default=False),
        fp8_recipe=get_str(o, "fp8_recipe", "options", default="tensorwise", choices=FP8_RECIPES),
        fp8_param_gather=get_bool(o, "fp8_param_gather", "options", default=False),
        fp4_recipe=None if o.get("fp4_recipe") is None else get_str(o, "fp4_recipe", "options", choices=FP4_RECIPES),
        num_layers_at_start_in_bf16=None if o.get("num_layers_at_start_in_bf16") is None else get_int(
            o, "num_layers_at_start_in_bf16", "options", minimum=0, maximum=MAX_LAYERS),
        num_layers_at_end_in_bf16=None if o.get("num_layers_at_end_in_bf16") is None else get_int(
            o, "num_layers_at_end_in_bf16", "options", minimum=0, maximum=MAX_LAYERS),
        activation_offload_layers=get_int(o, "activation_offload_layers", "options", default=0, minimum=0),
        cp_comm=get_str(o, "cp_comm", "options", default="allgather", choices=("allgather", "ring", "a2a")),
        cp_load_balance=get_bool(o, "cp_load_balance", "options", default=True),
        reshard_after_forward=None if o.get("reshard_after_forward") is None else get_bool(o, "reshard_after_forward", "options"),
        optimizer_dtypes=parse_optimizer_dtypes(o),
        price_per_gpu_hour_usd=get_float(o, "price_per_gpu_hour_usd", "options", default=None, positive=True),
        cuda_graphs=get_str(o, "cuda_graphs", "options", default="none", choices=CUDA_GRAPHS),
    )
    return o, opt


def _needs_switch(o: dict, opt, keys: tuple, switch: str, why: str = "") -> None:
    """One error when an option of ``keys`` is given (not False) while the boolean option ``switch``
    it refines is off."""
    for key in keys:
        v = getattr(opt, key)
        if o.get(key) not in (None, False) and not getattr(opt, switch):
            raise ConfigError(f"options.{key} = {str(v).lower() if isinstance(v, bool) else v} applies with "
                              f"options.{switch}: true{why}; set {switch}: true or drop {key}")


def _check_applies(t: dict, o: dict, par: ParallelSpec, tr: TrainingSpec, opt: OptionsSpec) -> None:
    """Settings the user wrote that the rest of the file makes meaningless are refused, not ignored
    (``parallel.ep`` on a dense model is the model; the checks that need the model or the GPU are in
    ``taskgraph.plan.resolve``). ``t``, ``o``: the training and options sections as written."""
    if "recompute" in t and "recompute_layers" in t:
        raise ConfigError(f"training.recompute = {brief(tr.recompute)} and training.recompute_layers are both given; "
                          f"recompute_layers sets every layer's policy: drop one of them")
    if o.get("fp8_recipe") is not None and tr.precision != "fp8":
        raise ConfigError(f"options.fp8_recipe = {brief(opt.fp8_recipe)} applies to training.precision: fp8 (it is "
                          f"{tr.precision!r}); set precision: fp8 or drop fp8_recipe")
    if o.get("fp4_recipe") is not None and tr.precision != "fp4":
        raise ConfigError(f"options.fp4_recipe = {brief(opt.fp4_recipe)} applies to training.precision: fp4 (it is "
                          f"{tr.precision!r}); set precision: fp4 or drop fp4_recipe")
    for key in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
        if o.get(key) is not None and tr.precision not in ("fp8", "fp4"):
            raise ConfigError(f"options.{key} = {getattr(opt, key)} keeps layers in BF16 under an fp8 / fp4 recipe, "
                              f"but training.precision = {tr.precision!r}; set precision: fp8 or fp4, or drop {key}")
    if o.get("reshard_after_forward") is not None and par.zero < 3:
        raise ConfigError(f"options.reshard_after_forward = {str(opt.reshard_after_forward).lower()} applies to ZeRO-3 "
                          f"/ FSDP (sharded parameters), but parallel.zero = {par.zero}; set zero: 3 or drop it")
    if o.get("pair_comm_sms") is not None and opt.pair_overlap != "concurrent":
        raise ConfigError(f"options.pair_comm_sms = {opt.pair_comm_sms} applies to options.pair_overlap: concurrent "
                          f"(it is {opt.pair_overlap!r}); set pair_overlap: concurrent or drop pair_comm_sms")
    # Megatron-LM transformer_config.py __post_init__: "overlap_moe_expert_parallel_comm must be enabled
    # when enabling delay_wgrad_compute"; the dispatcher SMs matter only beside overlapped compute
    _needs_switch(o, opt, ("delay_wgrad_compute", "moe_flex_dispatcher_num_sms"), "overlap_moe_expert_parallel_comm",
                  " (Megatron-LM requires it)")
    # Megatron-LM transformer_config.py __post_init__ (overlap_moe_expert_parallel_comm): "disable
    # moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm"
    if opt.moe_shared_expert_overlap and opt.overlap_moe_expert_parallel_comm:
        raise ConfigError("options.moe_shared_expert_overlap = true with options.overlap_moe_expert_parallel_comm: "
                          "Megatron-LM refuses the pair (\"disable moe_shared_expert_overlap when enabling "
                          "overlap_moe_expert_parallel_comm\"); drop one of them")
    _check_dispatcher(opt)
    _check_cuda_graphs(opt, tr)
    if opt.optimizer_offload_fraction > 1.0:
        raise ConfigError(f"options.optimizer_offload_fraction = {opt.optimizer_offload_fraction} must be in [0, 1] "
                          f"(the share of the parameters whose optimizer runs on the CPU)")
    _needs_switch(o, opt, ("optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d"), "optimizer_cpu_offload")
    _check_option_scope(o, par, tr, opt)
    check_optimizer_dtypes(o, par, tr, opt)


def _check_dispatcher(opt: OptionsSpec) -> None:
    """What Megatron-LM's transformer_config.py __post_init__ refuses with a dispatcher other than alltoall."""
    if opt.moe_dispatcher == "alltoall":
        return
    clash = [(opt.moe_max_nodes is not None, "moe_max_nodes", "prices DeepEP (Megatron's flex dispatcher)"),
             (opt.overlap_moe_expert_parallel_comm, "overlap_moe_expert_parallel_comm",
              "\"is supported with alltoall/flex token dispatcher\""),
             (opt.moe_shared_expert_overlap, "moe_shared_expert_overlap",
              "\"only works with alltoall or flex token dispatcher\"")]
    for bad, key, why in clash:
        if bad:
            raise ConfigError(f"options.moe_dispatcher = {opt.moe_dispatcher!r} with options.{key}, which {why}; "
                              f"set moe_dispatcher: alltoall or drop {key}")


def _check_cuda_graphs(opt: OptionsSpec, tr: TrainingSpec) -> None:
    """What Megatron-core refuses with CUDA graphs (transformer_config.py __post_init__, NVIDIA/Megatron-LM
    d98e8a6): "CUDA graphs not supported with CPU offloading" and "full recompute is only supported with
    full iteration CUDA graph" for the per-layer graphs; and only Megatron + TE captures them."""
    if opt.cuda_graphs == "none":
        return
    if opt.stack not in (None, "megatron-te"):
        raise ConfigError(f"options.cuda_graphs = {opt.cuda_graphs!r} captures Megatron-core / Transformer Engine "
                          f"graphs, but options.stack = {brief(opt.stack)} has no CUDA graph capture; "
                          f"set stack: megatron-te or cuda_graphs: none")
    if opt.cuda_graphs != "layers":
        return
    if opt.activation_offload_layers:
        raise ConfigError(f"options.cuda_graphs = 'layers' with options.activation_offload_layers = "
                          f"{opt.activation_offload_layers}: Megatron-core refuses per-layer graphs with CPU "
                          f"offloading; set cuda_graphs: full_iteration or drop activation_offload_layers")
    if "full" in set(tr.recompute_layers or (tr.recompute,)):
        raise ConfigError("options.cuda_graphs = 'layers' with full recomputation: Megatron-core supports full "
                          "recompute only with the full-iteration graph; set cuda_graphs: full_iteration or "
                          "training.recompute: selective / none")


def _check_option_scope(o: dict, par: ParallelSpec, tr: TrainingSpec, opt: OptionsSpec) -> None:
    """Options the user wrote (``o``) that have nothing to act on with these parallel sizes are
    refused, as Megatron-LM refuses most of them (checks that need the model or the cluster are in
    ``taskgraph.plan.resolve``)."""
    def given(key: str) -> bool:   # written and not its "off" value
        return o.get(key) not in (None, False, 0)

    def refuse(key: str, why: str, fix: str) -> None:
        v = getattr(opt, key)
        raise ConfigError(f"options.{key} = {str(v).lower() if isinstance(v, bool) else brief(v)} {why}; {fix}")
    if given("activation_offload_layers"):
        # Megatron-core transformer_config.py __post_init__ (cpu_offloading): "Currently there is no
        # support for Pipeline parallelism with CPU offloading", "CPU offloading does not work when
        # activation recomputation is enabled" (the layer bound needs the model: taskgraph/plan.py)
        if par.pp > 1:
            refuse("activation_offload_layers", f"offloads activations, which Megatron-core does not support with "
                   f"pipeline parallelism (parallel.pp = {par.pp})", "set pp: 1 or drop it")
        pols = set(tr.recompute_layers or (tr.recompute,)) - {"none"}
        if pols:
            refuse("activation_offload_layers", f"offloads activations, which Megatron-core refuses with activation "
                   f"recomputation ({min(pols)})", "set training.recompute: none or drop it")
    if given("pipeline_scatter_gather") and (par.sp or par.tp == 1 or par.pp == 1):
        why = ("parallel.sp = true already sends 1/tp of each activation" if par.sp else
               f"parallel.{'tp' if par.tp == 1 else 'pp'} = 1 leaves nothing to scatter")
        refuse("pipeline_scatter_gather", f"splits pipeline sends over the TP ranks, but {why}",
               "drop pipeline_scatter_gather")
    if given("tp_comm_overlap") and (par.tp == 1 or not par.sp):
        # Megatron-LM arguments.py: "Tensor parallel communication/GEMM overlap can happen only when
        # sequence parallelism is enabled" (and sequence parallelism is turned off with tp 1)
        refuse("tp_comm_overlap", "overlaps the sequence-parallel TP collectives with their GEMMs, which needs "
               f"parallel.tp > 1 and sp: true (tp = {par.tp}, sp = {str(par.sp).lower()})",
               "set tp > 1 and sp: true, or drop tp_comm_overlap")
    for key, src in (("profile_gpu", "profile"), ("collective_profile_gpu", "collective_profile")):
        if o.get(key) is not None and getattr(opt, src) is None:
            refuse(key, f"says which GPU the rows of options.{src} were measured on, but no {src} is given",
                   f"give options.{src} or drop {key}")
    if o.get("moe_imbalance") is not None and o.get("moe_routing") is not None:
        refuse("moe_routing", f"derives the busiest expert rank's load, which options.moe_imbalance = "
               f"{brief(opt.moe_imbalance)} already gives", "keep one of the two")
    if o.get("cp_comm") is not None and par.cp == 1:
        refuse("cp_comm", "chooses the context-parallel attention exchange, but parallel.cp = 1",
               "set cp > 1 or drop cp_comm")
    if given("p2p_overlap") and par.pp == 1:
        refuse("p2p_overlap", "overlaps pipeline sends with compute, but parallel.pp = 1 has none",
               "set pp > 1 or drop p2p_overlap")
    if o.get("overlap_param_gather") is True and par.zero == 0:
        # Megatron-LM arguments.py: "--overlap-param-gather only supported with distributed optimizer"
        refuse("overlap_param_gather", "overlaps the parameter all-gather of a sharded optimizer, but "
               "parallel.zero = 0 gathers nothing (Megatron-LM needs the distributed optimizer)",
               "set zero: 1 or more, or drop overlap_param_gather")


def check_strategy(strategy: Strategy) -> None:
    """Run every check of the strategy file on an already-built :class:`Strategy` (e.g. one that
    ``simulator.search.evaluate.vary`` changed field by field), so a value refused in a file is refused
    there too, with the same message. Raises :class:`ConfigError`."""
    from dataclasses import asdict

    def section(spec) -> dict:
        d = {}
        for k, v in asdict(spec).items():
            if v is None:
                continue
            d[k] = list(v) if isinstance(v, tuple) else v
        return d

    sched = strategy.schedule if strategy.schedule_csv is None else {"name": strategy.schedule,
                                                                       "csv": strategy.schedule_csv}
    parse_strategy({"model": strategy.model, "cluster": strategy.cluster, "parallel": section(strategy.parallel),
                    "schedule": sched, "training": section(strategy.training),
                    "options": section(strategy.options)}, ".", written=False)


def load_strategy(path) -> Strategy:
    data = load_mapping(path, "strategy file")
    return parse_strategy(data, Path(path).parent)


#: The shipped examples (installed with the package: pyproject.toml package-data).
EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"


def example_path(name: str) -> str:
    """The absolute path of a shipped example file, so code that reads one runs from any folder.

    >>> Path(example_path("gpt3-175b-1024-a100.yaml")).is_file()
    True
    """
    p = EXAMPLES_DIR / name
    if not p.is_file() or p.parent != EXAMPLES_DIR:
        names = sorted(x.name for x in EXAMPLES_DIR.glob("*.yaml"))
        raise ConfigError(f"example {brief(name)} is not one of {', '.join(names)}{did_you_mean(name, names)}")
    return str(p)


def example_names() -> list[str]:
    """The shipped examples' names (file names without ``.yaml``), sorted.

    >>> "gpt3-175b-1024-a100" in example_names()
    True
    """
    return sorted(p.stem for p in EXAMPLES_DIR.glob("*.yaml"))


def example_summary(name: str) -> str:
    """The first sentence of an example's header comment (one line for ``execsim examples``)."""
    lines = []
    for line in Path(example_path(name + ".yaml")).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text:
            if lines:
                break
            continue
        lines.append(text)
    first = " ".join(lines)
    import re
    end = re.search(r"(?<! al)(?<!e\.g)(?<!i\.e)\. ", first)   # the first full stop (not "et al.")
    first = first[:end.start() + 1] if end else first
    return first if len(first) <= 110 else first[:107].rstrip() + "..."


def is_strategy(data: dict) -> bool:
    """True when a mapping looks like a strategy file rather than a pipeline description."""
    return "pipeline" not in data and any(k in data for k in ("model", "cluster", "parallel", "training"))


__all__ = [
    "EXAMPLES_DIR",
    "OptionsSpec",
    "ParallelSpec",
    "Strategy",
    "TrainingSpec",
    "check_strategy",
    "did_you_mean",
    "example_names",
    "example_path",
    "example_summary",
    "is_strategy",
    "load_strategy",
    "parse_strategy",
]
