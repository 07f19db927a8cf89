"""Resolve a parsed strategy file against its model and cluster: a :class:`Plan`.

All checks that need the model or the world size live here (Megatron-LM's
``validate_args`` / torchtitan's config validation are the models): heads % tp, kv_heads vs tp,
layers over pp*vpp, global_batch % (micro_batch*dp), world size, schedule support. Every error names
the field, the value and a fix.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from strategies.actions import Schedule
from strategies.config import did_you_mean
from strategies.errors import ConfigError, ScheduleError, brief, cut
from strategies.limits import MAX_TOKENS_PER_MICROBATCH, check_actions, check_stages
from strategies.schedules import SCHEDULES, get_schedule
from strategies.schedules_combined import COMBINABLE, combined_1f1b
from strategies.strategy_file import Strategy
from taskgraph.cost import DTYPE_BYTES  # noqa: F401  (re-exported: the one element-size table)
from taskgraph.hf_config import load_hf_config
from taskgraph.lora import check_lora
from taskgraph.model import ModelSpec, get_model, load_model_yaml
from topologies.cluster import ClusterSpec, cluster_from_dict, get_cluster, load_cluster_yaml
from topologies.placement import ParallelSizes


@dataclass(frozen=True)
class Plan:
    """A strategy resolved into concrete objects and sizes.

    layers_per_stage: transformer layers of each virtual stage (len pp*vpp).
    microbatches: microbatches per pipeline per iteration = global_batch / (micro_batch * dp).
    """

    strategy: Strategy
    model: ModelSpec
    cluster: ClusterSpec
    sizes: ParallelSizes
    vpp: int
    sp: bool
    zero: int
    microbatches: int
    layers_per_stage: tuple[int, ...]
    schedule: Schedule
    warnings: tuple = ()
    """Inputs read but not modeled (e.g. Hugging Face config keys), one string each; the CLI prints them."""

    @property
    def num_gpus(self) -> int:
        return self.sizes.world_size

    @property
    def shard_size(self) -> int:
        """Ranks ZeRO/FSDP states are sharded over: dp_shard (HSDP) or all dp*cp replicas."""
        return self.strategy.parallel.dp_shard or self.sizes.dp * self.sizes.cp

    @property
    def expert_shard_size(self) -> int:
        """Ranks the routed experts' gradients are reduced over and their ZeRO / distributed-optimizer
        states sharded over: Megatron's expert-data-parallel group, world / (pp * ep * etp)
        (parallel_state expert RankGenerator; without folding etp = tp, so cp * dp / ep)."""
        s = self.sizes
        return s.tp * s.cp * s.dp // (s.expert_tp * s.ep)

    @property
    def reshard_after_forward(self) -> bool:
        """FSDP frees gathered parameters after each layer's forward (see OptionsSpec)."""
        r = self.strategy.options.reshard_after_forward
        return (self.sizes.pp == 1) if r is None else r

    @property
    def tokens_per_iteration(self) -> int:
        return self.strategy.training.global_batch * self.strategy.training.seq_len

    @cached_property
    def bf16_layers(self) -> tuple[int, int]:
        """(first, last): how many transformer layers at the start and at the end of the model keep their
        GEMMs in BF16 under an fp8 / fp4 recipe (Megatron --first-last-layers-bf16 with
        --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16, megatron/core/fp8_utils.py
        is_first_last_bf16_layer). Unset: none with fp8 (Megatron-Bridge MixedPrecisionConfig defaults
        0 / 0); with fp4 the NVFP4 recipe's share (arXiv 2509.25149 Section 4, "selective high-precision
        layers": the first two and the last eight of its 12B model's 62 blocks, ~16% of the linear
        layers), scaled to the model's depth: round(2L/62) and round(8L/62). bf16 / fp16: (0, 0).

        >>> first_last_bf16(126, "fp4", None, None)
        (4, 16)
        """
        o, tr = self.strategy.options, self.strategy.training
        return first_last_bf16(self.model.layers, tr.precision, o.num_layers_at_start_in_bf16,
                               o.num_layers_at_end_in_bf16)

    def layer_in_bf16(self, li: int) -> bool:
        """Layer ``li``'s GEMMs run in BF16 although the training precision is fp8 / fp4 (:attr:`bf16_layers`)."""
        first, last = self.bf16_layers
        return li < first or li >= self.model.layers - last

    def stage_layers(self, stage: int) -> range:
        """Global indices of the transformer layers in ``stage`` (counted from the first stage of its
        pipeline segment: DualPipe's second direction holds the same layers again)."""
        first = self.schedule.stage_segment(stage)[0] if self.schedule.segments else 0
        cum = self._layer_offsets
        start = cum[stage] - cum[first]
        return range(start, start + self.layers_per_stage[stage])

    @cached_property
    def _layer_offsets(self) -> tuple[int, ...]:
        """Prefix sums of layers_per_stage (stage_layers in O(1), not O(stages), per call)."""
        return tuple(itertools.accumulate(self.layers_per_stage, initial=0))


#: NVFP4 recipe (arXiv 2509.25149 Section 4): BF16 blocks at the start and at the end of its 62-block 12B model
NVFP4_BF16_FIRST, NVFP4_BF16_LAST, NVFP4_PAPER_LAYERS = 2, 8, 62


def first_last_bf16(layers: int, precision: str, first: int | None, last: int | None) -> tuple[int, int]:
    """(first, last) layers kept in BF16 (see :attr:`Plan.bf16_layers`).

    >>> first_last_bf16(32, "fp4", None, None), first_last_bf16(32, "fp8", None, 1), first_last_bf16(32, "bf16", 2, 2)
    ((1, 4), (0, 1), (0, 0))
    """
    if precision not in ("fp8", "fp4"):
        return 0, 0
    share = precision == "fp4"
    a = first if first is not None else (round(layers * NVFP4_BF16_FIRST / NVFP4_PAPER_LAYERS) if share else 0)
    b = last if last is not None else (round(layers * NVFP4_BF16_LAST / NVFP4_PAPER_LAYERS) if share else 0)
    a = min(a, layers)
    return a, min(b, layers - a)


def _divisors(n: int) -> list[int]:
    """Divisors for an error message: bounded work and length (``strategies.config.divisors``)."""
    from strategies.config import divisors
    return divisors(n)


def _input_path(spec: str, base_dir: str, field: str) -> Path:
    """``spec`` as a path (relative to ``base_dir``), or one ConfigError if it cannot name a file."""
    try:
        p = Path(spec) if Path(spec).is_absolute() else Path(base_dir) / spec
        p.exists()
        return p
    except (OSError, ValueError) as exc:  # embedded NUL, name too long, ...
        raise ConfigError(f"{field} = {brief(spec)} is not a usable file name ({cut(str(exc), 60)}); give a preset "
                          f"name or the path of a file") from None


def resolve_model(spec, base_dir: str, unused: list | None = None) -> ModelSpec:
    """The model of a strategy file; Hugging Face config keys that are not modeled go to ``unused``."""
    if isinstance(spec, dict):
        return load_model_yaml(spec)
    from taskgraph.model import PRESETS
    if spec in PRESETS:
        return get_model(spec)
    p = _input_path(spec, base_dir, "model")
    if p.is_dir():
        if (p / "config.json").exists():
            return load_hf_config(p / "config.json", unused=unused)
        raise ConfigError(f"model = {brief(spec)} is a directory without config.json (looked at {brief(str(p))}); give a "
                          f"model YAML, a Hugging Face config.json, or a folder that holds one")
    if p.exists():
        if p.suffix == ".json":
            return load_hf_config(p, unused=unused)
        return load_model_yaml(p)
    if "/" in spec or spec.endswith((".yaml", ".yml", ".json")):
        raise ConfigError(f"model = {brief(spec)}: file not found (looked at {brief(str(p))}); fix the path")
    raise ConfigError(f"model = {brief(spec)} is neither a preset{did_you_mean(spec, PRESETS)} nor a file; presets: "
                      f"{', '.join(sorted(PRESETS))}")


def resolve_cluster(spec, base_dir: str) -> ClusterSpec:
    if isinstance(spec, dict):
        return cluster_from_dict(spec, where="cluster")
    p = _input_path(spec, base_dir, "cluster")
    if p.exists():
        return load_cluster_yaml(p)
    if spec.endswith((".yaml", ".yml", ".json")):
        raise ConfigError(f"cluster = {brief(spec)}: file not found (looked at {brief(str(p))}); fix the path")
    return get_cluster(spec, nodes=1)


def even_layers(layers: int, stages: int, pp: int, vpp: int) -> tuple[int, ...]:
    if layers % stages:
        raise ConfigError(
            f"model.layers = {layers} does not split evenly over pp*vpp = {pp}*{vpp} = {stages} stages; "
            f"choose pp*vpp in {_divisors(layers)}, or give parallel.layers_per_stage (a list of {stages} "
            f"counts summing to {layers}, e.g. shorter first and last stages as in GLM-130B / Llama 3)")
    return (layers // stages,) * stages


def model_stages(schedule: str, pp: int, vpp: int) -> int:
    """Model stages a schedule cuts the layers into: pp for DualPipe (each stage held once per
    direction), pp*vpp otherwise (:func:`resolve`)."""
    return pp if schedule == "dualpipe" else pp * vpp


def regroup_layers(layers_per_stage, stages: int) -> tuple[int, ...]:
    """The layers of ``layers_per_stage`` cut into ``stages`` stages instead: as even as counts allow,
    the extra layers to the middle stages first, then to the first and the last (the stages that also
    hold the embedding and the head, lighter as in GLM-130B / Llama 3). For comparing schedules whose
    stage count differs from the file's (issue 41: DeepSeek-V3's 16 DualPipe stages -> 1F1B's 16 or
    interleaved 1F1B's 32).

    >>> regroup_layers((3, 4, 4, 2), 4)
    (3, 4, 4, 2)
    >>> regroup_layers((3, 4, 4, 2), 3)
    (4, 5, 4)
    >>> regroup_layers([3] + [4] * 14 + [2], 32)
    (1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1)
    """
    if len(layers_per_stage) == stages:
        return tuple(layers_per_stage)
    total = sum(layers_per_stage)
    if stages < 1 or total < stages:
        raise ConfigError(f"parallel.layers_per_stage: {total} layers cannot fill {stages} stages; give "
                          f"parallel.layers_per_stage with {stages} counts")
    base, extra = divmod(total, stages)
    order = list(range(1, stages - 1)) + [0, stages - 1] if stages > 2 else list(range(stages))
    out = [base] * stages
    for i in order[:extra]:
        out[i] += 1
    return tuple(out)


def rescheduled(strategy: Strategy, schedule: str | None = None, vpp: int | None = None) -> Strategy:
    """``strategy`` under another schedule and/or chunk count (``compare --schedules``, the search):
    the file's ``parallel.layers_per_stage``, given for its own stage count, regrouped for the new one
    (:func:`regroup_layers`)."""
    changed = (schedule is not None and schedule != strategy.schedule) or (vpp is not None and vpp != strategy.parallel.vpp)
    if schedule is not None:
        strategy = replace(strategy, schedule=schedule, schedule_csv=None)
    par = strategy.parallel
    if vpp is not None and vpp != par.vpp:
        par = replace(par, vpp=vpp)
    if changed and par.layers_per_stage is not None:   # the file's own list is checked as written
        par = replace(par, layers_per_stage=regroup_layers(
            par.layers_per_stage, model_stages(strategy.schedule, par.pp, par.vpp)))
    return strategy if par == strategy.parallel else replace(strategy, parallel=par)


def resolve(strategy: Strategy) -> Plan:
    """Cross-check ``strategy`` with its model and cluster and build the schedule.

    The steps, in the order their errors are raised: the model and the cluster
    (:func:`_resolved_cluster`), what the model admits (:func:`_check_model_fit`), the data-parallel
    size (:func:`_parallel_sizes`), the microbatch count (:func:`_microbatch_count`), the layers of
    each stage (:func:`_stage_layers`), precision and options (:func:`_check_precision_options`),
    then the schedule."""
    unused: list = []
    model = resolve_model(strategy.model, strategy.base_dir, unused)
    cluster = _resolved_cluster(strategy)
    par = strategy.parallel
    tp, pp, ep, vpp = par.tp, par.pp, par.ep, par.vpp
    written = _check_model_fit(strategy, model, cluster)
    sizes = _parallel_sizes(strategy, model, cluster)
    microbatches = _microbatch_count(strategy, model, sizes.dp)
    lps = _stage_layers(strategy, model)
    _check_precision_options(strategy, model, cluster, written)
    schedule = _schedule(strategy, pp, microbatches, vpp)
    opt = strategy.options
    if opt.cuda_graphs == "full_iteration" and model.is_moe and opt.moe_capacity_factor is None:
        # taskgraph/cuda_graphs.py: a dropless MoE layer copies its token counts to the host (Megatron-core
        # transformer_config.py: "moe cuda graph is only supported with drop-padding MoE")
        raise ConfigError(f"options.cuda_graphs = 'full_iteration' captures every MoE layer, but {model.name} is "
                          f"dropless (no options.moe_capacity_factor): its token counts go to the host; set "
                          f"moe_capacity_factor or cuda_graphs: layers")
    if strategy.options.overlap_moe_expert_parallel_comm:
        _check_a2a_overlap(strategy, model, cluster, ep)
        schedule = combined_1f1b(schedule)
    if strategy.schedule == "dualpipe":
        lps = tuple(lps) + tuple(lps)   # virtual stage pp + s is direction 1's copy of model stage s
    warnings = ((f"model config keys not modeled (ignored): {', '.join(unused[:20])}"
                 f"{' ...' if len(unused) > 20 else ''}"),) if unused else ()
    return Plan(strategy, model, cluster, sizes, vpp, par.sp and tp > 1, par.zero, microbatches, tuple(lps), schedule,
                warnings)


def _resolved_cluster(strategy: Strategy):
    """The strategy's cluster with its collective profile and its stack's host dispatch applied."""
    cluster = resolve_cluster(strategy.cluster, strategy.base_dir)
    if strategy.options.collective_profile:
        from topologies.collective_profile import load_collective_profile
        cluster = replace(cluster, collective_profile=load_collective_profile(
            strategy.options.collective_profile, cluster.gpu.name, strategy.options.collective_profile_gpu))
    if strategy.options.attention_kernel is not None or strategy.options.cross_entropy is not None:
        from taskgraph.stacks import run_stack
        o = strategy.options
        run_stack(o.stack, o.attention_kernel, o.cross_entropy)  # one error line for a bad kernel or loss
    if strategy.options.stack is not None:
        from taskgraph.stacks import get_stack
        stack = get_stack(strategy.options.stack)  # one clear error for an unknown stack, listing the known ones
        if stack.host_us_per_kernel is not None and not cluster.host_us_per_kernel_given:
            # the stack's measured host dispatch replaces the cluster default (stacks.yaml [HOST-TT]);
            # a cluster file's own host_us_per_kernel (measured on its CPU) wins
            cluster = replace(cluster, host_us_per_kernel=stack.host_us_per_kernel)
    return cluster


def _check_model_fit(strategy: Strategy, model, cluster) -> dict:
    """The parallel sizes and MoE options the model admits; returns the options the file wrote."""
    par, tr = strategy.parallel, strategy.training
    tp, pp, cp, ep, vpp = par.tp, par.pp, par.cp, par.ep, par.vpp
    check_lora(model, tr.lora, tp)   # training.lora's targets and rank against the model (taskgraph/lora.py)
    if model.heads % tp:
        raise ConfigError(f"parallel.tp = {tp} must divide model.heads = {model.heads} ({model.name}); "
                          f"choose tp in {_divisors(model.heads)}")
    if model.kv_heads % tp and tp % model.kv_heads:
        raise ConfigError(f"parallel.tp = {tp} and model.kv_heads = {model.kv_heads}: one must divide the other "
                          f"(KV heads are split over, or replicated across, TP ranks); choose tp in "
                          f"{sorted(set(_divisors(model.kv_heads)) | {k for k in _divisors(model.heads) if k % model.kv_heads == 0})}")
    if model.kv_heads % tp:
        raise ConfigError(f"parallel.tp = {tp} exceeds model.kv_heads = {model.kv_heads}: KV-head replication is "
                          f"not modeled; choose tp <= {model.kv_heads} dividing it: {_divisors(model.kv_heads)}")
    if tr.seq_len % cp:
        raise ConfigError(f"training.seq_len = {tr.seq_len} must be divisible by parallel.cp = {cp}")
    if cp > 1 and (tr.seq_len // cp) % 2:
        raise ConfigError(f"training.seq_len / parallel.cp = {tr.seq_len // cp} must be even (causal load "
                          f"balancing splits each rank's share in two)")
    if ep > 1 and not model.experts:
        raise ConfigError(f"parallel.ep = {ep} but model {brief(model.name)} has no experts; set ep: 1")
    written = strategy.raw.get("options") if isinstance(strategy.raw, dict) else None
    written = written if isinstance(written, dict) else {}
    moe_opts = [k for k in ("moe_imbalance", "moe_routing", "moe_capacity_factor", "moe_max_nodes",
                                  "moe_dispatcher") if written.get(k) is not None]
    if moe_opts and not model.experts:
        raise ConfigError(f"options.{moe_opts[0]} = {brief(written[moe_opts[0]])} applies to MoE models, but model "
                          f"{brief(model.name)} has no experts; drop {', '.join('options.' + k for k in moe_opts)}")

    _check_option_targets(strategy, model, cluster, written)

    if model.experts and model.experts % ep:
        raise ConfigError(f"parallel.ep = {ep} must divide model.experts = {model.experts}; choose ep in "
                          f"{_divisors(model.experts)}")
    if strategy.options.moe_dispatcher == "allgather_allreduce" and (par.etp or tp) > 1:
        # NeMo AutoModel experts.py GroupedExperts.forward: "We only support 1D mesh for MoE" (EP only)
        raise ConfigError(f"options.moe_dispatcher = 'allgather_allreduce' (AutoModel's torch dispatcher) gathers over "
                          f"the 1-D EP mesh with untensor-parallel experts, but expert TP = {par.etp or tp}; set "
                          f"parallel.etp: 1 (or tp: 1) or moe_dispatcher: alltoall")
    if vpp > 1 and pp == 1:
        raise ConfigError(f"parallel.vpp = {vpp} needs parallel.pp > 1 (virtual stages interleave over pipeline "
                          f"ranks); set vpp: 1 or pp > 1")
    return written


def _parallel_sizes(strategy: Strategy, model, cluster) -> ParallelSizes:
    """The sizes of every axis, dp from the world size when the file leaves it out."""
    par = strategy.parallel
    tp, pp, cp, ep = par.tp, par.pp, par.cp, par.ep
    world = cluster.num_gpus
    mp = tp * pp * cp
    if par.dp is None:
        if world % mp:
            raise ConfigError(f"cluster has {world} GPUs, not a multiple of tp*pp*cp = {tp}*{pp}*{cp} = {mp}; "
                              f"change the parallel sizes or the node count, or set parallel.dp explicitly")
        dp = world // mp
    else:
        dp = par.dp
        if mp * dp != world:
            raise ConfigError(f"tp({tp}) * pp({pp}) * cp({cp}) * dp({dp}) = {mp * dp} != world size {world} "
                              f"({cluster.nodes} nodes x {cluster.gpus_per_node} GPUs); set dp={world // mp if world % mp == 0 else '?'} "
                              f"or change the cluster's nodes to {-(-mp * dp // cluster.gpus_per_node)}")
    if par.etp is not None:
        if not model.experts:
            raise ConfigError(f"parallel.etp = {par.etp} sets the experts' tensor parallelism but model "
                              f"{brief(model.name)} has no experts; drop etp")
        if model.expert_ffn % par.etp:
            raise ConfigError(f"parallel.etp = {par.etp} must divide model.expert_ffn = {model.expert_ffn}; choose "
                              f"etp in {_divisors(model.expert_ffn)[:12]}")
    sizes = ParallelSizes(tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, etp=par.etp, order=par.order)
    if par.dp_shard is not None and (dp * cp) % par.dp_shard:
        raise ConfigError(f"parallel.dp_shard = {par.dp_shard} must divide dp*cp = {dp}*{cp} = {dp * cp} (the ranks "
                          f"that hold the same weights); choose dp_shard in {_divisors(dp * cp)[:16]}")
    return sizes


def _microbatch_count(strategy: Strategy, model, dp: int) -> int:
    """Microbatches per iteration (global_batch / (micro_batch * dp)), checked with the tokens per
    microbatch, the model's longest sequence and the schedule's bounds."""
    par, tr = strategy.parallel, strategy.training
    pp, vpp = par.pp, par.vpp
    if tr.global_batch % (tr.micro_batch * dp):
        step = tr.micro_batch * dp
        lo, hi = tr.global_batch // step * step, (tr.global_batch // step + 1) * step
        fix = f"{lo} or {hi}" if lo > 0 else f"{hi}"
        raise ConfigError(f"training.global_batch = {tr.global_batch} must be a multiple of micro_batch * dp = "
                          f"{tr.micro_batch} * {dp} = {step}; use global_batch = {fix}, or change micro_batch")
    microbatches = tr.global_batch // (tr.micro_batch * dp)
    if tr.micro_batch * tr.seq_len > MAX_TOKENS_PER_MICROBATCH:
        raise ConfigError(f"training.micro_batch * seq_len = {tr.micro_batch} * {tr.seq_len} = "
                          f"{tr.micro_batch * tr.seq_len:,} tokens per microbatch is over the limit of "
                          f"{MAX_TOKENS_PER_MICROBATCH:,} (docs/strategy-file.md, Limits); use a smaller micro_batch")
    if model.max_seq is not None and tr.seq_len > model.max_seq:
        raise ConfigError(f"training.seq_len = {tr.seq_len} is longer than model {brief(model.name)} supports "
                          f"(model.max_seq = {model.max_seq}; max_position_embeddings in a Hugging Face config.json); "
                          f"use seq_len <= {model.max_seq} or raise the model's limit")
    check_stages(pp, max(vpp, 2) if strategy.schedule in ("zb-v", "dualpipe-v", "dualpipe") else vpp)
    check_actions(pp, max(vpp, 2) if strategy.schedule in ("zb-v", "dualpipe-v", "dualpipe") else vpp, microbatches,
                  f"schedule {brief(strategy.schedule)} (microbatches = global_batch / (micro_batch * dp) = "
                  f"{tr.global_batch} / ({tr.micro_batch} * {dp}))")
    return microbatches


def _stage_layers(strategy: Strategy, model) -> list | tuple:
    """Layers per model stage: the file's ``parallel.layers_per_stage`` checked, or an even split."""
    par = strategy.parallel
    pp, vpp = par.pp, par.vpp
    # DualPipe (two directions): the model is cut into pp stages, each held twice (once per direction)
    stages = pp if strategy.schedule == "dualpipe" else pp * vpp
    if par.layers_per_stage is not None:
        lps = par.layers_per_stage
        if len(lps) != stages:
            raise ConfigError(f"parallel.layers_per_stage has {len(lps)} entries but "
                              f"{'pp (dualpipe: model stages, each held once per direction)' if stages == pp and vpp > 1 else 'pp*vpp'}"
                              f" = {stages}; give one count per {'model' if stages == pp and vpp > 1 else 'virtual'} stage")
        if sum(lps) != model.layers:
            raise ConfigError(f"parallel.layers_per_stage sums to {sum(lps)} but model.layers = {model.layers}; "
                              f"make the counts add up")
    else:
        lps = even_layers(model.layers, stages, pp, 1 if strategy.schedule == "dualpipe" else vpp)
    return lps


def _check_master_weights(strategy: Strategy) -> None:
    """``training.master_weights: false`` (bf16 parameters and moments, no fp32 master copy) needs a PyTorch
    FSDP2 stack and 16-bit weights that need no loss scaling. Megatron-LM's mixed-precision optimizers always
    keep fp32 main parameters (megatron/core/optimizer/optimizer.py Float16OptimizerWithFloat16Params,
    distrib_optimizer.py's main_param shards; DeepSpeed's likewise); torch's GradScaler refuses fp16
    gradients ("Attempting to unscale FP16 gradients.", torch/amp/grad_scaler.py _unscale_grads_)."""
    from taskgraph.stacks import DEFAULT_STACK, get_stack
    tr, name = strategy.training, strategy.options.stack or DEFAULT_STACK
    stack = get_stack(name)
    if (stack.master_weights if tr.master_weights is None else tr.master_weights):
        return
    if not stack.fsdp2_copies:
        raise ConfigError(f"training.master_weights = false (bf16 parameters, no fp32 master copy) needs a PyTorch "
                          f"FSDP2 stack, but options.stack = {name!r} keeps fp32 master weights in its optimizer; "
                          f"use stack torchtitan, torchtitan-compile or nemo-automodel, or drop master_weights")
    if tr.precision == "fp16":
        said = "" if tr.master_weights is False else f" (stack {name}'s default)"
        raise ConfigError(f"training.master_weights = false{said} with precision fp16: fp16 parameters need an fp32 "
                          f"master copy for the loss scaler (torch GradScaler refuses fp16 gradients); use bf16 or "
                          f"set master_weights: true")


def _check_precision_options(strategy: Strategy, model, cluster, written: dict) -> None:
    """Per-layer recompute, the precision the GPU must support, and options that need a precision,
    SMs or shared experts."""
    tr = strategy.training
    if tr.recompute_layers is not None and len(tr.recompute_layers) != model.layers:
        raise ConfigError(f"training.recompute_layers has {len(tr.recompute_layers)} entries but the model has "
                          f"{model.layers} layers; give one policy per layer")
    if tr.precision == "fp8" and cluster.gpu.peak_flops_fp8 is None:
        raise ConfigError(f"training.precision = 'fp8' but {cluster.gpu.name} has no FP8 tensor cores; use bf16 "
                          f"or a Hopper/Blackwell cluster")

    if tr.precision == "fp4" and cluster.gpu.peak_flops_fp4 is None:
        raise ConfigError(f"training.precision = 'fp4' but {cluster.gpu.name} has no FP4 tensor cores (NVFP4 needs "
                          f"Blackwell: B200, GB200, GB300); use fp8 or bf16, or a Blackwell cluster such as gb300-nvl72")

    _check_master_weights(strategy)
    opt = strategy.options
    # (an fp8_recipe without fp8 is refused by strategies/strategy_file.py check_strategy)
    kept = (opt.num_layers_at_start_in_bf16 or 0) + (opt.num_layers_at_end_in_bf16 or 0)
    if kept > model.layers:
        raise ConfigError(f"options.num_layers_at_start_in_bf16 + num_layers_at_end_in_bf16 = {kept} exceeds "
                          f"model.layers = {model.layers}; keep at most {model.layers} layers in BF16")
    if opt.fp8_param_gather and tr.precision != "fp8":
        raise ConfigError(f"options.fp8_param_gather = true keeps parameters in FP8, but training.precision = "
                          f"{tr.precision!r}; set precision: fp8 or drop fp8_param_gather")
    if opt.fp8_recipe == "mxfp8" and tr.precision == "fp8" and not cluster.gpu.architecture.lower().startswith("blackwell"):
        raise ConfigError(f"options.fp8_recipe = 'mxfp8' needs Blackwell tensor cores (MXFP8 block scaling); "
                          f"{cluster.gpu.name} is {cluster.gpu.architecture}: use tensorwise, delayed, rowwise or blockwise")
    if (opt.pair_overlap == "concurrent" or written.get("pair_comm_sms") is not None) and \
            opt.pair_comm_sms >= cluster.gpu.sm_count:
        raise ConfigError(f"options.pair_comm_sms = {opt.pair_comm_sms} leaves no SMs for compute on "
                          f"{cluster.gpu.name} ({cluster.gpu.sm_count} SMs); use fewer (DeepSeek-V3: 20 of 132)")
    if opt.moe_shared_expert_overlap and not model.shared_experts:
        raise ConfigError(f"options.moe_shared_expert_overlap = true overlaps the shared experts with the expert "
                          f"all-to-alls, but model {brief(model.name)} has no shared experts (model.shared_experts = 0); "
                          f"drop it or use a model with shared experts")


#: schedules whose rank orders hold overlapped forward/backward pairs (strategies/schedules_dualpipe.py)
PAIR_SCHEDULES = ("dualpipe", "dualpipe-v")


def _check_option_targets(strategy: Strategy, model, cluster, written: dict) -> None:
    """Options written in the file that this model, cluster or schedule gives nothing to act on are
    refused (the checks that need only the strategy file are in strategies/strategy_file.py)."""
    opt = strategy.options
    raw = strategy.raw if isinstance(strategy.raw, dict) else {}
    n = opt.activation_offload_layers
    if n and n >= model.layers:
        # Megatron-core transformer_config.py __post_init__: "CPU offloading can be done only for
        # layers less than {num_layers}" (cpu_offloading_num_layers < num_layers)
        raise ConfigError(f"options.activation_offload_layers = {n} must be less than the model's {model.layers} "
                          f"layers (Megatron-core offloads at most num_layers - 1); choose 1-{model.layers - 1}")
    # (the two checks below only for the cluster and schedule as written: a search varies them, and a
    # candidate's schedule or size is not the user's setting)
    if written.get("moe_max_nodes") is not None and model.experts and cluster.nodes == 1 \
            and raw.get("cluster") == strategy.cluster:
        raise ConfigError(f"options.moe_max_nodes = {brief(written['moe_max_nodes'])} limits how many nodes a token's "
                          f"experts span, but the cluster has one node; drop moe_max_nodes")
    par = raw.get("parallel") if isinstance(raw.get("parallel"), dict) else {}
    as_written = raw.get("schedule", "1f1b" if par.get("vpp", 1) == 1 else "interleaved-1f1b")  # strategy_file's default
    for key in ("pair_overlap", "pair_comm_sms"):
        if written.get(key) is not None and strategy.schedule_csv is None and as_written == strategy.schedule \
                and strategy.schedule not in PAIR_SCHEDULES and not opt.overlap_moe_expert_parallel_comm:
            raise ConfigError(f"options.{key} = {brief(written[key])} sets DualPipe's overlapped forward/backward "
                              f"pairs, but schedule {brief(strategy.schedule)} has none; use schedule "
                              f"{' or '.join(PAIR_SCHEDULES)}, or drop {key}")


def _check_a2a_overlap(strategy: Strategy, model, cluster, ep: int) -> None:
    """What Megatron-LM asserts for --overlap-moe-expert-parallel-comm (transformer_config.py
    __post_init__: expert parallelism, no full recompute) and the schedules it runs combined steps in."""
    opt, tr = strategy.options, strategy.training
    key = "options.overlap_moe_expert_parallel_comm = true"
    if strategy.schedule not in COMBINABLE:
        raise ConfigError(f"{key} merges the steady-state steps of {' or '.join(COMBINABLE)} (Megatron-LM); "
                          f"schedule = {brief(strategy.schedule)}: use one of those, or pair_overlap: concurrent "
                          f"with dualpipe / dualpipe-v")
    if not model.experts or ep < 2:
        raise ConfigError(f"{key} overlaps the expert all-to-all, but "
                          f"{'model ' + brief(model.name) + ' has no experts' if not model.experts else 'parallel.ep = 1'}"
                          f" (Megatron-LM: only supported with expert model parallelism); set ep > 1 or drop it")
    written = strategy.raw.get("options") if isinstance(strategy.raw, dict) else None
    if isinstance(written, dict) and written.get("pair_overlap") is not None:
        raise ConfigError(f"options.pair_overlap = {brief(opt.pair_overlap)} sets DualPipe's pairs; with {key} the "
                          f"combined steps always run their halves together (SMs: moe_flex_dispatcher_num_sms): "
                          f"drop pair_overlap")
    pols = tr.recompute_layers or (tr.recompute,)
    if "full" in pols:
        raise ConfigError(f"{key} with full recompute: Megatron-LM refuses it (\"disable full recomputation when "
                          f"enabling overlap_moe_expert_parallel_comm\"); use recompute: selective or none")
    if opt.moe_flex_dispatcher_num_sms is not None and opt.moe_flex_dispatcher_num_sms >= cluster.gpu.sm_count:
        raise ConfigError(f"options.moe_flex_dispatcher_num_sms = {opt.moe_flex_dispatcher_num_sms} leaves no SMs for "
                          f"compute on {cluster.gpu.name} ({cluster.gpu.sm_count} SMs); use fewer (DeepEP: 20-24)")


def _schedule(strategy: Strategy, pp: int, m: int, vpp: int) -> Schedule:
    name = strategy.schedule
    if name == "custom":
        s = load_custom_schedule(strategy.schedule_csv, "schedule.csv")
        if s.pp != pp or s.num_stages != pp * vpp or s.microbatches != m:
            raise ConfigError(f"schedule.csv {brief(strategy.schedule_csv)} has pp={s.pp}, {s.num_stages} stages, "
                              f"{s.microbatches} microbatches; the strategy needs pp={pp}, pp*vpp={pp * vpp}, "
                              f"{m} microbatches (global_batch / (micro_batch*dp))")
        return s
    if name not in SCHEDULES:
        raise ConfigError(f"schedule = {brief(name)} is not known{did_you_mean(name, SCHEDULES)}; valid: "
                          f"{', '.join(sorted(SCHEDULES))}, or {{name: custom, csv: FILE}}")
    if name in ("zb-v", "dualpipe-v", "dualpipe") and vpp != 2:
        raise ConfigError(f"schedule = {brief(name)} places two stages per rank (V shape): set parallel.vpp: 2")
    if name in ("1f1b", "gpipe") and vpp != 1:
        raise ConfigError(f"schedule = {brief(name)} runs one stage per rank but parallel.vpp = {vpp}: use "
                          f"interleaved-1f1b (or another multi-chunk schedule), or set vpp: 1")
    try:
        return get_schedule(name, pp, m, vpp)
    except ScheduleError as exc:
        raise ConfigError(f"schedule = {brief(name)} with pp={pp}, vpp={vpp}, {m} microbatches "
                          f"(global_batch / (micro_batch*dp)): {exc}") from None


def load_custom_schedule(csv: str, field: str) -> Schedule:
    """Read, validate and deadlock-check a PyTorch action CSV; errors name ``field`` and the file."""
    from strategies.schedule_csv import read_schedule_csv
    from strategies.validate import check_deadlock, validate_schedule
    if not Path(csv).is_file():
        raise ConfigError(f"{field} = {brief(csv)}: file not found; fix the path (relative paths are read from the "
                          f"input file's folder)")
    try:
        s = read_schedule_csv(Path(csv))  # a Path: a file name with a comma is still a file name
        validate_schedule(s)
        check_deadlock(s)
    except ScheduleError as exc:
        raise ConfigError(f"{field} {brief(csv)}: {exc}") from None
    return s
