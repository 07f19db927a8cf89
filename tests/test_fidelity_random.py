"""Coarse fidelity agrees with operator fidelity on random strategies with every option switched on
(issue 26 item 6): 500 small strategies drawn with a fixed seed, each option of docs/strategy-file.md
at a non-default value in at least 20 of them, iteration times within 2 %.

The draws are small (a few layers, a few GPUs) so that both fidelities run in milliseconds; what they
exercise is how each option enters the cost records and the lowering, which does not depend on size.
Options that cannot change a timeline (``fidelity`` itself, ``memory_reserve_gb``,
``price_per_gpu_hour_usd``) are drawn too; ``profile`` / ``profile_gpu`` need a measured file and are
covered by tests/test_profiling*.py (named in ``NOT_DRAWN``); the test checks that every option key is
either drawn or named there, so a new option cannot reach one fidelity only unnoticed.
"""
from __future__ import annotations

import numpy as np
import pytest

import simulator.simulation.strategy as sim_mod
from strategies.errors import ConfigError
from strategies.strategy_file import OPTION_KEYS, OptionsSpec, parse_strategy

TOLERANCE = 0.02
DRAWS = 500
MIN_ON = 20
NOT_DRAWN = {"profile": "needs a measured CSV (tests/test_profiling*.py)",
             "profile_gpu": "needs a measured CSV (tests/test_profiling*.py)",
             "collective_profile": "needs a measured CSV; applied in collective_time, below both fidelities "
                                   "(tests/test_collective_profile.py)",
             "collective_profile_gpu": "needs a measured CSV (tests/test_collective_profile.py)"}

#: option -> values other than the default to draw from
OPTION_VALUES = {
    "overlap_grad_reduce": [False],
    "overlap_param_gather": [False],
    "grad_bucket_mb": [10.0, 50.0, 200.0],
    "flash_attention": [False],
    "overlap_handoff": ["each"],
    "memory_reserve_gb": [0.0, 6.0],
    "fidelity": ["coarse"],
    "fp32_grad_accum": [False],
    "tp_comm_overlap": [True],
    "p2p_overlap": [True],
    "tp_async_backward": [False],
    "p2p_host_gap_us": [0.0, 100.0],
    "moe_imbalance": [1.3, 2.0],
    "moe_capacity_factor": [1.0, 1.5],
    "moe_max_nodes": [1, 2],
    "pair_overlap": ["concurrent"],
    "pair_comm_sms": [8, 24],
    "fp8_recipe": ["blockwise"],
    "cp_comm": ["ring", "a2a"],
    "cp_load_balance": [False],
    "reshard_after_forward": [True, False],
    "price_per_gpu_hour_usd": [1.5],
    "overlap_interference": [False],
    "stack": ["torchtitan", "torchtitan-compile", "deepspeed", "llm-foundry", "deepspeed-zero3-2021",
              "megatron-2021", "megatron-2021-torch-ddp", "megatron-2022"],
    "fp8_param_gather": [True],
    "activation_offload_layers": [1, 2],
    "overlap_moe_expert_parallel_comm": [True],
    "delay_wgrad_compute": [True],
    "moe_flex_dispatcher_num_sms": [0, 16, 32],
    "optimizer_cpu_offload": [True],
    "optimizer_offload_fraction": [0.0, 0.5],
    "overlap_cpu_optimizer_d2h_h2d": [True],
    "moe_shared_expert_overlap": [True],
    "pipeline_scatter_gather": [True],
    "fp4_recipe": ["nvfp4"],
    "num_layers_at_start_in_bf16": [0, 1],
    "num_layers_at_end_in_bf16": [0, 1, 2],
    "moe_routing": ["aux_loss", "aux_loss_free", "random", "balanced"],
    "moe_dispatcher": ["allgather", "allgather_allreduce"],
    "cuda_graphs": ["layers", "full_iteration"],
    "attention_kernel": ["fa2", "fa3", "cudnn", "flex", "varlen", "sdpa", "catalog", "triton"],
    "cross_entropy": ["fused", "eager-fp32", "native", "te"],
    "optimizer_dtypes": [{}, {"exp_avg": "bf16", "exp_avg_sq": "bf16"}, {"main_params": "fp16", "exp_avg": "fp8"},
                         {"exp_avg": "fp16", "exp_avg_sq": "bf16"}],
}
#: NVFP4 training on B200 and the BF16 first / last layers of fp8 / fp4 recipes, drawn by _draw_fp4 from
#: its own generator (same reason)
FP4_KEYS = ("fp4_recipe", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16")
#: Megatron's CPU optimizer offload, drawn by _draw_cpu_offload from its own generator (same reason)
OFFLOAD_KEYS = ("optimizer_cpu_offload", "optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d")
#: Megatron's combined 1F1B options, drawn by _draw_a2a_overlap from their own generator (so the
#: draws above stay what they were before these options existed)
A2A_KEYS = ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute", "moe_flex_dispatcher_num_sms")
#: options that only mean something with a MoE model (on two nodes: moe_max_nodes), fp8, cp > 1, zero 3 or a
#: DualPipe schedule
NEEDS = {"moe_imbalance": "moe", "moe_capacity_factor": "moe", "moe_max_nodes": "moe-multinode",
         "fp8_recipe": "fp8", "cp_comm": "cp", "cp_load_balance": "cp", "reshard_after_forward": "zero3",
         "pair_overlap": "dualpipe", "pair_comm_sms": "dualpipe", "overlap_handoff": "dualpipe",
         "fp8_param_gather": "fp8", **{k: "a2a-overlap" for k in A2A_KEYS}, **{k: "cpu-offload" for k in OFFLOAD_KEYS},
         "moe_shared_expert_overlap": "shared-overlap", "pipeline_scatter_gather": "tp-pp",
         **{k: "low-precision" for k in FP4_KEYS}, "activation_offload_layers": "activation-offload",
         "moe_routing": "moe-routing", "attention_kernel": "attention-kernel", "moe_dispatcher": "moe-dispatcher",
         "cuda_graphs": "cuda-graphs", "cross_entropy": "cross-entropy", "optimizer_dtypes": "precision-aware"}


def _draw_cross_entropy(data: dict, on: set, i: int) -> None:
    """options.cross_entropy (taskgraph/cross_entropy.py) in a third of the draws, any stack; its own
    generator keeps the other draws as they were."""
    rng = np.random.default_rng((20261129, i))
    if rng.random() < 1 / 3:
        values = OPTION_VALUES["cross_entropy"]
        data["options"]["cross_entropy"] = values[int(rng.integers(len(values)))]
        on.add("cross_entropy")


def _draw_attention_kernel(data: dict, on: set, i: int) -> None:
    """options.attention_kernel (stacks.yaml attention_kernels, 'sdpa', 'catalog') in a third of the draws
    with a fused attention kernel, any stack; its own generator keeps the other draws as they were."""
    rng = np.random.default_rng((20261131, i))
    if data["options"].get("flash_attention", True) and rng.random() < 1 / 3:
        values = OPTION_VALUES["attention_kernel"]
        data["options"]["attention_kernel"] = values[int(rng.integers(len(values)))]
        on.add("attention_kernel")


def _draw_moe_routing(data: dict, on: set, i: int) -> None:
    """Name the routing (options.moe_routing) in half of the MoE draws that leave moe_imbalance to it
    (the rest run the default 'learned'); its own generator keeps the other draws as they were."""
    rng = np.random.default_rng((20261201, i))
    if "experts" not in data["model"] or "moe_imbalance" in data["options"] or rng.random() < 0.5:
        return
    values = OPTION_VALUES["moe_routing"]
    data["options"]["moe_routing"] = values[int(rng.integers(len(values)))]
    on.add("moe_routing")


def _draw_shared_overlap(data: dict, on: set, i: int) -> None:
    """Give a MoE draw without the combined 1F1B (Megatron refuses the pair) a shared expert and, in
    most of them, the shared-expert overlap; its own generator keeps the other draws as they were."""
    rng = np.random.default_rng((20261127, i))
    if "experts" not in data["model"] or data["options"].get("overlap_moe_expert_parallel_comm") or rng.random() < 0.2:
        return
    data["model"]["shared_experts"] = 1
    if rng.random() < 0.8:
        data["options"]["moe_shared_expert_overlap"] = True
        on.add("moe_shared_expert_overlap")


def _draw_moe_dispatcher(data: dict, on: set, i: int) -> None:
    """Name a token dispatcher other than the all-to-all (options.moe_dispatcher) in most MoE draws that
    Megatron lets use one (no DeepEP, no combined 1F1B; the shared-expert overlap, which it also
    refuses, dropped where drawn; AutoModel's needs expert TP 1); its own generator keeps the other
    draws as they were."""
    rng = np.random.default_rng((20261135, i))
    o = data["options"]
    if "experts" not in data["model"] or rng.random() < 0.3 or any(o.get(k) for k in (
            "moe_max_nodes", "overlap_moe_expert_parallel_comm")):
        return
    if o.get("moe_shared_expert_overlap"):
        if rng.random() < 0.5:
            return
        del o["moe_shared_expert_overlap"]
        on.discard("moe_shared_expert_overlap")
    values = OPTION_VALUES["moe_dispatcher"]
    if data["parallel"]["tp"] > 1:
        values = [v for v in values if v != "allgather_allreduce"]
    o["moe_dispatcher"] = values[int(rng.integers(len(values)))]
    on.add("moe_dispatcher")


def _draw_cuda_graphs(data: dict, on: set, i: int) -> None:
    """options.cuda_graphs in a third of the Megatron + TE draws (taskgraph/cuda_graphs.py), dropping what
    Megatron-core refuses with it: per-layer graphs without CPU offloading or full recompute, the full
    iteration on a MoE model with a capacity factor; its own generator keeps the other draws as they were."""
    rng = np.random.default_rng((20261139, i))
    o, tr = data["options"], data["training"]
    if o.get("stack", "megatron-te") != "megatron-te" or rng.random() >= 1 / 3:
        return
    mode = str(rng.choice(OPTION_VALUES["cuda_graphs"]))
    if mode == "layers":
        o.pop("activation_offload_layers", None)
        on.discard("activation_offload_layers")
        if tr["recompute"] == "full":
            tr["recompute"] = "selective"
    elif "experts" in data["model"] and o.get("moe_capacity_factor") is None:
        o["moe_capacity_factor"] = 1.25
    o["cuda_graphs"] = mode
    on.add("cuda_graphs")


def _draw_activation_offload(data: dict, on: set, i: int) -> None:
    """Offload the activations of 1-2 layers in a quarter of the draws it applies to: Megatron-core
    offloads only without pipeline parallelism and without recomputation (transformer_config.py), so
    the main loop's draws rarely held it (own generator: the other draws are unchanged)."""
    rng = np.random.default_rng((20261128, i))
    if data["parallel"]["pp"] != 1 or data["model"]["layers"] < 3 or rng.random() >= 0.25:
        return
    data["options"]["activation_offload_layers"] = int(rng.choice(OPTION_VALUES["activation_offload_layers"]))
    data["training"]["recompute"] = "none"
    on.add("activation_offload_layers")


def _draw_cpu_offload(data: dict, on: set, i: int) -> None:
    """Switch on the CPU optimizer (and with it a fraction / overlapped copies) in a fifth of the draws."""
    rng = np.random.default_rng((20261126, i))
    if rng.random() >= 0.2:
        return
    data["options"]["optimizer_cpu_offload"] = True
    on.add("optimizer_cpu_offload")
    if rng.random() < 0.5:
        data["options"]["optimizer_offload_fraction"] = float(rng.choice(OPTION_VALUES["optimizer_offload_fraction"]))
        on.add("optimizer_offload_fraction")
    if rng.random() < 0.5:
        data["options"]["overlap_cpu_optimizer_d2h_h2d"] = True
        on.add("overlap_cpu_optimizer_d2h_h2d")


def _draw_a2a_overlap(data: dict, on: set, i: int) -> None:
    """Switch on Megatron's combined 1F1B (and with it delayed wgrad / dispatcher SMs) in a MoE draw
    with a 1F1B or interleaved schedule, as Megatron accepts it: ep > 1, no full recompute."""
    rng = np.random.default_rng((20261125, i))
    par, tr = data["parallel"], data["training"]
    if "experts" not in data["model"] or data["schedule"] not in ("1f1b", "interleaved-1f1b") or \
            (par["dp"] * par["cp"]) % 2 or rng.random() < 0.2:
        return
    par["ep"] = 2
    if tr["recompute"] == "full":
        tr["recompute"] = "selective"
    data["options"]["overlap_moe_expert_parallel_comm"] = True
    on.add("overlap_moe_expert_parallel_comm")
    if rng.random() < 0.6:
        data["options"]["delay_wgrad_compute"] = True
        on.add("delay_wgrad_compute")
    if rng.random() < 0.75:
        data["options"]["moe_flex_dispatcher_num_sms"] = int(rng.choice(OPTION_VALUES["moe_flex_dispatcher_num_sms"]))
        on.add("moe_flex_dispatcher_num_sms")


def _draw_scatter_gather(data: dict, on: set, i: int) -> None:
    """Megatron-LM 2021-22's pipeline scatter/gather in most draws with tp and pp > 1 and no sequence
    parallelism (the only ones where it acts); its own generator keeps the other draws as they were."""
    rng = np.random.default_rng((20261129, i))
    par = data["parallel"]
    if par["tp"] < 2 or par["pp"] < 2 or par["sp"] or rng.random() < 0.2:   # refused with sp (issue 42)
        return
    data["options"]["pipeline_scatter_gather"] = True
    on.add("pipeline_scatter_gather")


def _draw_te_delayed(data: dict, on: set, i: int) -> None:
    """Transformer Engine's delayed scaling (options.fp8_recipe 'delayed': its amax reductions over the
    stage's tp x dp x cp ranks per chunk, taskgraph/te_scaling.py) in half of the fp8 draws that kept the
    default current scaling; its own generator keeps the other draws as they were."""
    rng = np.random.default_rng((20261129, i))
    if data["training"]["precision"] == "fp8" and "fp8_recipe" not in data["options"] and rng.random() < 0.5:
        data["options"]["fp8_recipe"] = "delayed"
        on.add("fp8_recipe")


def _draw_fp4(data: dict, on: set, i: int) -> None:
    """NVFP4 (training.precision fp4) on DGX B200 in a sixth of the bf16 draws, options.fp4_recipe written
    in half of those; BF16 first / last layers (Megatron --num-layers-at-start/end-in-bf16) in half of
    the fp8 and fp4 draws; its own generator keeps the other draws as they were."""
    rng = np.random.default_rng((20261130, i))
    tr, opts = data["training"], data["options"]
    if tr["precision"] == "bf16" and rng.random() < 1 / 6:
        tr["precision"] = "fp4"
        data["cluster"]["preset"] = "dgx-b200"
        if rng.random() < 0.5:
            opts["fp4_recipe"] = "nvfp4"
            on.add("fp4_recipe")
    if tr["precision"] not in ("fp8", "fp4"):
        return
    for key in FP4_KEYS[1:]:
        if rng.random() < 0.5:
            values = OPTION_VALUES[key]
            opts[key] = values[int(rng.integers(len(values)))]
            on.add(key)


#: model fields drawn like the options (each on in at least MIN_ON draws), by _draw_model_fields
MODEL_KEYS = ("attention_chunk", "global_attention_start")


def _draw_model_fields(data: dict, on: set, i: int) -> None:
    """Chunked local attention (Llama 4 iRoPE) in a tenth of the draws: blocks of 256 of the 1,024
    tokens, every 2nd layer global, from layer 0 (torchtitan's phase) in half of them; its own
    generator keeps the other draws as they were."""
    rng = np.random.default_rng((20261128, i))
    if rng.random() >= 0.1:
        return
    data["model"].update(attention_chunk=256, global_attention_every=2)
    on.add("attention_chunk")
    if rng.random() < 0.5:
        data["model"]["global_attention_start"] = 0
        on.add("global_attention_start")


#: training fields drawn like the options (each on in at least MIN_ON draws), by _draw_lora
TRAINING_FIELDS = ("lora",)


def _draw_lora(data: dict, on: set, i: int) -> None:
    """LoRA fine-tuning (training.lora, taskgraph/lora.py) in a sixth of the draws: rank 8 or 16 on the
    attention projections, or on every linear layer of a dense model; its own generator keeps the
    other draws as they were."""
    rng = np.random.default_rng((20261202, i))
    if rng.random() >= 1 / 6:
        return
    targets = ["qkv", "attn_out"] if "experts" in data["model"] or rng.random() < 0.5 else \
        ["qkv", "attn_out", "mlp_up", "mlp_down"]
    data["training"]["lora"] = {"rank": int(rng.choice([8, 16])), "dropout": float(rng.choice([0.0, 0.1])),
                                "targets": targets}
    on.add("lora")


#: what a software stack adds (taskgraph/stack_costs.py, taskgraph/torch_cp.py), each counted like an option
STACK_MECHANISMS = ("fsdp2-copies", "torch-cp", "deepspeed-pipe", "dtensor-host", "ds-zero3-fetch", "automodel",
                    "fsdp1-flat")
#: training fields drawn like the options: training.master_weights (bf16 parameters, _draw_master_weights)
TRAINING_DRAWN = ("master_weights",)


def _draw_stack_mechanisms(data: dict, on: set, i: int) -> None:
    """Puts a draw on the stack whose mechanism it can exercise: torchtitan under ZeRO-3 without pp
    (FSDP2's copies) or with cp > 1 and a fused kernel (PyTorch's ring attention); deepspeed in bf16 at
    ZeRO 0/1 with pp > 1 (unfused accumulation, serial exchanges); torchtitan with tp > 1 (DTensor's host
    dispatch, and FSDP2's hooks under ZeRO-3); DeepSpeed 2021 under ZeRO-3 without pp (per-parameter
    synchronous fetch); llm-foundry under ZeRO-3 in the rest without pp and half with it (FSDP1's
    FlatParameter kernels). Own generator (issue 38)."""
    rng = np.random.default_rng((20261130, i))
    par, opt, tr = data["parallel"], data["options"], data["training"]
    u = rng.random()
    if par["zero"] == 3 and par["pp"] == 1 and u < 0.45:
        opt["stack"], tag = "torchtitan", "fsdp2-copies"
    elif par["zero"] == 3 and par["pp"] == 1 and u < 0.9:   # stacks.yaml [DS-Z3-2021]
        opt["stack"], tag = "deepspeed-zero3-2021", "ds-zero3-fetch"
    elif par["zero"] == 3 and (par["pp"] == 1 or u < 0.5):   # stacks.yaml [FSDP1]: FlatParameter kernels
        opt["stack"], tag = "llm-foundry", "fsdp1-flat"
    elif par["cp"] > 1 and opt.get("flash_attention", True) and opt.get("cp_comm") != "a2a" and u < 0.6:
        opt["stack"], tag = str(rng.choice(["torchtitan", "torchtitan-compile"])), "torch-cp"
    elif tr["precision"] == "bf16" and par["zero"] <= 1 and par["pp"] > 1 and u < 0.3:
        opt["stack"], tag = "deepspeed", "deepspeed-pipe"
    elif par["tp"] > 1 and u < 0.6:   # DTensor's host dispatch (stacks.yaml [HOST-DT])
        opt["stack"], tag = str(rng.choice(["torchtitan", "torchtitan-compile"])), "dtensor-host"
    else:
        return
    on.update(("stack", tag))
    if opt["stack"].startswith("torchtitan") and par["tp"] > 1:
        on.add("dtensor-host")


def _draw_automodel(data: dict, on: set, i: int) -> None:
    """NeMo AutoModel (stacks.yaml [AM]) on half of the draws no stack mechanism took that are MoE with
    ep > 1 or ZeRO-3 (FSDP2 + EP, its runs); its own generator keeps the other draws as they were."""
    rng = np.random.default_rng((20261129, i))
    par, opt = data["parallel"], data["options"]
    if "stack" in opt or not ((par["ep"] > 1 and "experts" in data["model"]) or par["zero"] == 3):
        return
    if rng.random() < 0.5:
        opt["stack"] = "nemo-automodel"
        on.update(("stack", "automodel"))
        if par["tp"] > 1:
            on.add("dtensor-host")


def _draw_master_weights(data: dict, on: set, i: int) -> None:
    """training.master_weights against the stack's default (stacks.yaml ``master_weights``) in half of the bf16
    draws on a PyTorch FSDP2 stack (the only ones that may drop the fp32 copy; AutoModel's default is bf16
    parameters, so its draws price both); its own generator keeps the other draws as they were."""
    rng = np.random.default_rng((20261131, i))
    stack, tr = data["options"].get("stack"), data["training"]
    if stack in ("torchtitan", "torchtitan-compile", "nemo-automodel") and tr["precision"] == "bf16" \
            and rng.random() < 0.5:
        tr["master_weights"] = stack != "nemo-automodel"
        on.add("master_weights")


def _draw_optimizer_dtypes(data: dict, on: set, i: int) -> None:
    """Megatron's precision-aware optimizer (options.optimizer_dtypes) in a quarter of the draws it applies
    to (a Megatron stack, the distributed optimizer), bf16 main gradients where the gradient buffer is bf16;
    its own generator keeps the other draws as they were."""
    rng = np.random.default_rng((20261137, i))
    o, tr = data["options"], data["training"]
    if o.get("stack", "megatron-te") != "megatron-te" or data["parallel"]["zero"] < 1 \
            or tr.get("master_weights") is False or rng.random() >= 0.25:
        return
    dtypes = dict(OPTION_VALUES["optimizer_dtypes"][int(rng.integers(len(OPTION_VALUES["optimizer_dtypes"])))])
    if o.get("fp32_grad_accum") is False and tr["precision"] != "fp16":
        dtypes["main_grads"] = "bf16"
    o["optimizer_dtypes"] = dtypes
    on.add("optimizer_dtypes")


def _draw(rng: np.random.Generator, i: int) -> tuple[dict, set]:
    moe = rng.random() < 0.3
    model = {"preset": "mixtral-8x7b" if moe else "llama3-8b", "layers": int(rng.choice([2, 4])),
             "hidden": 1024, "heads": 8, "kv_heads": 4, "ffn": 2048, "vocab": 8192}
    if moe:
        model.update({"experts": 4, "top_k": 2, "expert_ffn": 1024})
    tp = int(rng.choice([1, 2]))
    pp = int(rng.choice([1, 2]))
    cp = int(rng.choice([1, 2])) if rng.random() < 0.4 else 1
    ep = 2 if moe and rng.random() < 0.7 else 1
    nodes = int(rng.choice([1, 2]))
    world = 8 * nodes
    if world % (tp * pp * cp):
        tp = 1
    dp = world // (tp * pp * cp)
    if moe and ep > 1 and dp * cp % ep:
        ep = 1
    sched_pool = ["1f1b", "gpipe", "zb-h1"] + (["interleaved-1f1b", "zb-v", "dualpipe-v"] if pp > 1 else [])
    if pp > 1 and rng.random() < 0.25:
        sched_pool = ["dualpipe", "dualpipe-v"]
    schedule = str(rng.choice(sched_pool))
    vpp = 2 if schedule in ("interleaved-1f1b", "zb-v", "dualpipe-v", "dualpipe") else 1
    layers = model["layers"]
    if layers % (pp * vpp):
        model["layers"] = pp * vpp * (1 + layers // (pp * vpp))
    precision = "fp8" if rng.random() < 0.2 else "bf16"
    zero = int(rng.choice([0, 1, 3])) if pp == 1 or rng.random() < 0.5 else 1
    micro = int(rng.choice([1, 2]))
    mbs = int(rng.choice([2, 4, 8])) * (2 if schedule == "dualpipe" else 1)
    tags = {"moe"} if moe else set()
    if moe and nodes > 1:   # node-limited routing is refused on one node (nothing to limit)
        tags.add("moe-multinode")
    if precision == "fp8":
        tags.add("fp8")
    if cp > 1:
        tags.add("cp")
    if zero == 3:
        tags.add("zero3")
    if schedule.startswith("dualpipe"):
        tags.add("dualpipe")
    options = {}
    on = set()
    for key, values in OPTION_VALUES.items():
        need = NEEDS.get(key)
        if need and need not in tags:
            continue
        if rng.random() < (0.6 if need in ("dualpipe", "moe-multinode") else 0.3):
            options[key] = values[int(rng.integers(len(values)))]
            on.add(key)
    if "pair_comm_sms" in options:   # meaningful with concurrent pairs only
        options["pair_overlap"] = "concurrent"
        on.add("pair_overlap")
    if (options.get("tp_comm_overlap") or moe) and tp > 1:   # both need sequence parallelism (Megatron)
        sp = True
    else:
        sp = bool(tp > 1 and rng.random() < 0.5)
    data = {"model": model, "cluster": {"preset": "dgx-h100", "nodes": nodes},
            "parallel": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "vpp": vpp, "sp": sp, "zero": zero},
            "schedule": schedule,
            "training": {"micro_batch": micro, "global_batch": micro * dp * mbs, "seq_len": 1024,
                         "precision": precision, "recompute": str(rng.choice(["none", "selective", "full"]))},
            "options": options}
    _draw_a2a_overlap(data, on, i)
    _draw_cpu_offload(data, on, i)
    _draw_activation_offload(data, on, i)
    _draw_shared_overlap(data, on, i)
    _draw_model_fields(data, on, i)
    _draw_scatter_gather(data, on, i)
    _draw_stack_mechanisms(data, on, i)
    _draw_automodel(data, on, i)
    _draw_master_weights(data, on, i)
    _draw_fp4(data, on, i)
    _draw_moe_routing(data, on, i)
    _draw_te_delayed(data, on, i)
    _draw_attention_kernel(data, on, i)
    _draw_moe_dispatcher(data, on, i)
    _draw_cuda_graphs(data, on, i)
    _draw_cross_entropy(data, on, i)
    _draw_lora(data, on, i)
    _draw_optimizer_dtypes(data, on, i)
    return data, on


def _strategies():
    rng = np.random.default_rng(20261125)
    out, tries = [], 0
    from taskgraph.plan import resolve
    while len(out) < DRAWS and tries < 20 * DRAWS:
        tries += 1
        data, on = _draw(rng, tries)
        try:
            s = parse_strategy(data, ".")
            resolve(s)
        except ConfigError:
            continue
        out.append((s, on))
    return out


@pytest.fixture(scope="module")
def draws():
    return _strategies()


def test_every_option_is_drawn_or_named():
    assert set(OPTION_KEYS) == set(OPTION_VALUES) | set(NOT_DRAWN), \
        f"options neither drawn nor named: {set(OPTION_KEYS) - set(OPTION_VALUES) - set(NOT_DRAWN)}"
    defaults = OptionsSpec()
    for key, values in OPTION_VALUES.items():
        assert all(v != getattr(defaults, key) for v in values), key


def test_each_option_is_on_in_enough_draws(draws):
    assert len(draws) == DRAWS
    counts = {k: sum(k in on for _, on in draws) for k in (*OPTION_VALUES, *MODEL_KEYS, *STACK_MECHANISMS, *TRAINING_FIELDS,
                                                                 *TRAINING_DRAWN)}
    low = {k: n for k, n in counts.items() if n < MIN_ON}
    assert not low, f"options switched on in fewer than {MIN_ON} of {DRAWS} draws: {low}"


def test_random_strategies_agree_across_fidelities(draws):
    bad = []
    for s, on in draws:
        op = sim_mod.simulate_strategy(s, fidelity="operator").training.iteration_time_s
        co = sim_mod.simulate_strategy(s, fidelity="coarse").training.iteration_time_s
        if not (op > 0 and abs(co / op - 1) <= TOLERANCE):
            bad.append((f"{100 * (co / op - 1):+.2f}%", s.parallel, s.schedule, sorted(on)))
    assert not bad, f"{len(bad)} of {len(draws)} disagree by more than {TOLERANCE:.0%}; first: {bad[:3]}"


def test_split_backward_table_matches_the_schedules():
    # the coarse records release DP buckets during the W pass of split schedules (taskgraph/coarse.py);
    # the registry knows the families by name: the names must say what the orders do
    from strategies.schedules import SCHEDULES, get_schedule
    from strategies.schedules import has_split_backward as _split_backward
    for name in SCHEDULES:
        s = get_schedule(name, 4, 8, 2 if name in ("interleaved-1f1b", "zb-v", "dualpipe-v", "dualpipe", "looped-bfs") else 1)
        scan = any(a.kind == "W" for order in s.orders for x in order for a in getattr(x, "sub_actions", (x,)))
        assert _split_backward(s) == scan, name
