"""torchtitan ``train_configs/*.toml`` jobs -> a strategy mapping (see :mod:`strategies.importers`)."""
from __future__ import annotations

from strategies.config import did_you_mean
from strategies.errors import ConfigError
from strategies.import_common import Imported, _cluster, _walk

# ------------------------------------------------------------------------------------------ torchtitan

#: torchtitan [model] name + flavor -> execsim preset (torchtitan/models/*/__init__.py flavors)
TORCHTITAN_FLAVORS = {("llama3", "8B"): "llama3-8b", ("llama3", "70B"): "llama3-70b", ("llama3", "405B"): "llama3-405b",
                      ("deepseek_v3", "671B"): "deepseek-v3", ("qwen3", "8B"): "qwen3-8b", ("qwen3", "32B"): "qwen3-32b"}
#: torchtitan pipeline_parallel_schedule (torch.distributed.pipelining names) -> execsim schedule, chunks per rank
TORCHTITAN_SCHEDULES = {"1F1B": ("1f1b", 1), "GPipe": ("gpipe", 1), "Interleaved1F1B": ("interleaved-1f1b", 2),
                        "LoopedBFS": ("looped-bfs", 2), "ZBVZeroBubble": ("zb-v", 2), "DualPipeV": ("dualpipe-v", 2),
                        "InterleavedZeroBubble": ("zb-h1", 1)}
_TT_READ = {"model.name", "model.flavor", "training.local_batch_size", "training.batch_size", "training.global_batch_size",
            "training.seq_len", "training.steps", "training.mixed_precision_param", "parallelism.data_parallel_replicate_degree",
            "parallelism.data_parallel_shard_degree", "parallelism.tensor_parallel_degree",
            "parallelism.pipeline_parallel_degree", "parallelism.context_parallel_degree",
            "parallelism.expert_parallel_degree", "parallelism.pipeline_parallel_schedule",
            "parallelism.pipeline_parallel_microbatch_size", "parallelism.fsdp_reshard_after_forward",
            "parallelism.enable_async_tensor_parallel", "activation_checkpoint.mode"}
#: sections that hold no execution settings (logging, checkpoint paths, data): not reported
_TT_QUIET = ("job.", "metrics.", "profiling.", "checkpoint.", "comm.", "validation.", "optimizer.", "lr_scheduler.")


def import_torchtitan(data: dict, *, cluster: str | None = None, nodes: int | None = None,
                      vocab: int | None = None) -> Imported:
    """Map a torchtitan ``train_configs/*.toml`` job to a strategy (FSDP = ZeRO-3 over the shard group)."""
    sec = lambda name: data.get(name) or {}  # noqa: E731
    mdl, tr, par, ac = sec("model"), sec("training"), sec("parallelism"), sec("activation_checkpoint")
    key = (str(mdl.get("name", "")), str(mdl.get("flavor", "")))
    if key not in TORCHTITAN_FLAVORS:
        raise ConfigError(f"torchtitan [model] name = {key[0]!r} flavor = {key[1]!r} has no execsim preset"
                          f"{did_you_mean(key[1], [f for n, f in TORCHTITAN_FLAVORS if n == key[0]])}; known: "
                          f"{', '.join(f'{n} {f}' for n, f in TORCHTITAN_FLAVORS)}")
    cl = _cluster(cluster, nodes, "torchtitan config")

    def deg(name: str, default: int = 1) -> int:
        v = par.get(name, default)
        if isinstance(v, bool) or not isinstance(v, int) or (v < 1 and not (v == -1 and name.endswith("shard_degree"))):
            raise ConfigError(f"torchtitan [parallelism] {name} = {str(v)[:40]!r} must be a positive integer"
                              f"{' or -1' if name.endswith('shard_degree') else ''}")
        return v

    tp, pp, cp = deg("tensor_parallel_degree"), deg("pipeline_parallel_degree"), deg("context_parallel_degree")
    rep, shard = deg("data_parallel_replicate_degree"), deg("data_parallel_shard_degree", -1)
    ep = deg("expert_parallel_degree")
    name, vpp = "1f1b", 1
    if pp > 1:
        sname = str(par.get("pipeline_parallel_schedule", "1F1B"))
        if sname not in TORCHTITAN_SCHEDULES:
            raise ConfigError(f"torchtitan [parallelism] pipeline_parallel_schedule = {sname!r} is not modeled"
                              f"{did_you_mean(sname, TORCHTITAN_SCHEDULES)}; use one of {', '.join(TORCHTITAN_SCHEDULES)}")
        name, vpp = TORCHTITAN_SCHEDULES[sname]
    local = tr.get("local_batch_size", tr.get("batch_size", 8))
    seq = tr.get("seq_len", 2048)
    for k, v in (("local_batch_size", local), ("seq_len", seq)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"torchtitan [training] {k} = {str(v)[:40]!r} must be a positive integer")
    parallel: dict = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "sp": tp > 1,   # torchtitan TP always shards sequence
                      "zero": 3 if shard != 1 else 0}
    if shard > 0:
        parallel["dp"] = rep * shard
    if rep > 1 and shard != 1:
        hsdp = "parallelism.data_parallel_replicate_degree (HSDP: sharding within a replica group is not modeled; "\
               "simulated as FSDP over all DP ranks)"
    else:
        hsdp = None
    if vpp > 1:
        parallel["vpp"] = vpp
    mb = par.get("pipeline_parallel_microbatch_size", 1) if pp > 1 else local
    ac_mode = str(ac.get("mode", "selective"))
    if ac_mode not in ("none", "selective", "full"):
        raise ConfigError(f"torchtitan [activation_checkpoint] mode = {ac_mode!r} must be none, selective or full")
    precision = "bf16" if str(tr.get("mixed_precision_param", "bfloat16")) == "bfloat16" else "fp16"
    training: dict = {"micro_batch": mb, "global_batch": None, "seq_len": seq, "precision": precision,
                      # torchtitan's selective AC ('op' policy) saves matmul outputs and recomputes the rest:
                      # closest execsim policy is selective (attention core recomputed)
                      "recompute": ac_mode}
    strategy = {"model": TORCHTITAN_FLAVORS[key], "cluster": cl, "parallel": parallel, "schedule": name,
                "training": training, "options": {"overlap_grad_reduce": True, "overlap_param_gather": True,
                                                  "tp_comm_overlap": par.get("enable_async_tensor_parallel") is True},
                "_local_batch": local}
    if tr.get("steps"):
        strategy["_steps"] = tr["steps"]
    flat = _walk(data)
    seen = [k for k in flat if k not in _TT_READ and not k.startswith(_TT_QUIET)]
    if hsdp:
        seen.append(hsdp)
    return Imported(strategy, tuple(seen), "torchtitan")
