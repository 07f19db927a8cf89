"""What the importers share (:mod:`strategies.importers`): the :class:`Imported` record, tokenizer
vocabularies, the cluster from the caller, Megatron/NeMo recompute settings, dotted key walks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strategies.errors import ConfigError

#: Vocabulary sizes of tokenizers named in recipes (the tokenizer's own vocab; Megatron pads it).
#: GPT-2 BPE 50257 (Radford 2019); Llama 2 / Mistral / Mixtral SentencePiece 32000 (Touvron 2023,
#: HF config.json); Llama 3 tiktoken 128256 (Dubey 2024 Section 2.1 / HF config.json).
TOKENIZER_VOCAB = {"gpt2": 50257, "GPT2BPETokenizer": 50257, "Llama2Tokenizer": 32000, "meta-llama/Llama-2": 32000,
                   "meta-llama/Meta-Llama-3": 128256, "meta-llama/Llama-3": 128256, "meta-llama/Meta-Llama-3.1": 128256,
                   "mistralai/Mistral": 32000, "mistralai/Mixtral": 32000}


@dataclass(frozen=True)
class Imported:
    """A strategy mapping built from another tool's configuration."""

    strategy: dict
    """Strategy-file mapping (model, cluster, parallel, schedule, training, options)."""
    unmodeled: tuple
    """Flags or keys the source sets that the simulator does not model, in source order."""
    source: str
    """Which importer made it ('megatron', 'nemo', 'torchtitan')."""


def _tokenizer_vocab(name: str | None) -> int | None:
    if not name:
        return None
    for prefix, v in TOKENIZER_VOCAB.items():
        if str(name).startswith(prefix):
            return v
    return None


def _cluster(cluster: str | None, nodes: int | None, where: str) -> dict:
    if not cluster:
        raise ConfigError(f"{where}: the cluster is not in the source; give --cluster PRESET (e.g. dgx-h100) "
                          f"and --nodes N")
    if nodes is None:
        raise ConfigError(f"{where}: the number of nodes is not in the source; give --nodes N")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"--nodes = {nodes!r} must be a positive integer")
    return {"preset": cluster, "nodes": nodes}


def _recompute(granularity: str | None, method: str | None, num_layers: int | None, layers: int,
               stages: int, where: str) -> dict:
    """Megatron/NeMo activation recomputation -> training.recompute (+ recompute_layers for 'block').

    Megatron (arguments.py, transformer_block.py): 'selective' recomputes the attention core;
    'full' + 'uniform' recomputes every layer (in groups of N); 'full' + 'block' recomputes the first
    N layers of each pipeline (virtual) stage and keeps the rest."""
    if granularity in (None, "", "none", "null"):
        return {"recompute": "none"}
    if granularity == "selective":
        return {"recompute": "selective"}
    if granularity != "full":
        raise ConfigError(f"{where} recompute granularity = {granularity!r} must be full or selective")
    if method in (None, "uniform"):
        return {"recompute": "full"}
    if method != "block":
        raise ConfigError(f"{where} recompute method = {method!r} must be uniform or block")
    if num_layers is None:
        raise ConfigError(f"{where} recompute method 'block' needs the number of layers (recompute-num-layers)")
    if layers % stages:
        return {"recompute": "full"}  # uneven stages: the simulator's own split decides; stay conservative
    per = layers // stages
    if not 0 <= num_layers <= per:
        raise ConfigError(f"{where} recompute-num-layers = {num_layers} with method 'block' recomputes that many "
                          f"layers of each pipeline stage, but a stage holds {per} ({layers} layers over {stages} "
                          f"stages); give at most {per}")
    n = num_layers
    return {"recompute_layers": (["full"] * n + ["none"] * (per - n)) * stages}


def _walk(d: Any, prefix: str = "") -> list[str]:
    """Dotted names of the leaves of ``d`` that are set (None = not set, not listed)."""
    if isinstance(d, dict):
        out = []
        for k, v in d.items():
            if v is None:
                continue
            out += _walk(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]
        return out
    return []


def _capacity(options: dict, factor: float | None, pad: bool) -> None:
    """Token dropping (--moe-expert-capacity-factor; NeMo moe_expert_capacity_factor): the busiest
    rank processes at most factor x the mean (options.moe_capacity_factor). Padding to capacity
    (--moe-pad-expert-input-to-capacity) makes every expert process exactly factor x the mean, i.e.
    the busiest rank's load is the factor: options.moe_imbalance = factor."""
    if factor is None or factor <= 0:     # None / -1: dropless (Megatron's default)
        return
    options["moe_capacity_factor"] = factor
    if pad:
        options["moe_imbalance"] = max(1.0, factor)


def _int_value(v: Any, name: str) -> int:
    if isinstance(v, bool) or not str(v).strip().isdigit():
        raise ConfigError(f"{name} = {str(v)[:40]!r} must be a non-negative integer")
    return int(str(v).strip())


def moe_dispatch_options(get, spell, options: dict, notes: list, expert_parallel: bool, where: str,
                         shared: bool = False) -> None:
    """The MoE token dispatcher and its overlap, as Megatron-LM's TransformerConfig fields name them
    (``get(field)``: the source's value or None; ``spell(field)``: how the source spells it in a
    note; ``where + spell(field)`` in an error):

    * ``moe_token_dispatcher_type: flex`` with ``moe_flex_dispatcher_backend: deepep`` (the default;
      ``moe_enable_deepep`` is its deprecated spelling): DeepEP's normal kernels send each token over
      RDMA once per destination node, then over NVLink (topologies/moe_dispatch.py), so
      ``options.moe_max_nodes`` = the nodes a token reaches: ``moe_router_group_topk`` (group-limited
      routing) or else its top-k;
    * ``overlap_moe_expert_parallel_comm``, ``delay_wgrad_compute`` and the dispatcher's SMs
      (``moe_flex_dispatcher_num_sms``, formerly ``moe_deepep_num_sms``) map one to one;
    * ``moe_shared_expert_overlap`` maps one to one when the model has shared experts (``shared``);
      without them Megatron never calls the overlapped path (moe_layer.py), so it is a note.

    Megatron's own refusals (transformer_config.py __post_init__) are one error here."""
    flex = get("moe_token_dispatcher_type") == "flex"
    if get("moe_enable_deepep") is True and not flex:
        raise ConfigError(f"{where}{spell('moe_enable_deepep')} needs {spell('moe_token_dispatcher_type')} flex "
                          f"(Megatron: \"DeepEP backend is only supported with flex token dispatcher\"); set it")
    backend = str(get("moe_flex_dispatcher_backend") or "deepep")
    group_topk = get("moe_router_group_topk")
    if expert_parallel and flex and backend == "deepep":
        options["moe_max_nodes"] = _int_value(group_topk if group_topk is not None else get("moe_router_topk") or 2,
                                              where + spell("moe_router_group_topk" if group_topk is not None
                                                            else "moe_router_topk"))
    else:
        if flex and expert_parallel:
            notes.append(f"{spell('moe_flex_dispatcher_backend')} {backend} (simulated as the all-to-all dispatcher)")
        if group_topk is not None:   # the plain all-to-all sends every routed copy to its expert's GPU
            notes.append(f"{spell('moe_router_group_topk')} {group_topk} (no effect without DeepEP's node-deduplicated "
                         f"dispatch, {spell('moe_token_dispatcher_type')} flex)")
    if get("moe_shared_expert_overlap") is True:
        if get("overlap_moe_expert_parallel_comm") is True:   # transformer_config.py __post_init__
            raise ConfigError(f"{where}{spell('moe_shared_expert_overlap')} with {spell('overlap_moe_expert_parallel_comm')}: "
                              f"Megatron refuses the pair (\"disable moe_shared_expert_overlap when enabling "
                              f"overlap_moe_expert_parallel_comm\"); drop one of them")
        if not shared:
            notes.append(f"{spell('moe_shared_expert_overlap')} (no effect without shared experts)")
        elif str(get("moe_token_dispatcher_type") or "allgather") not in ("alltoall", "flex"):
            raise ConfigError(f"{where}{spell('moe_shared_expert_overlap')} needs {spell('moe_token_dispatcher_type')} "
                              f"alltoall or flex (Megatron: \"moe_shared_expert_overlap only works with alltoall or "
                              f"flex token dispatcher\"; its default is allgather); set it")
        else:
            options["moe_shared_expert_overlap"] = True
    sms = get("moe_flex_dispatcher_num_sms")
    sms_key = "moe_flex_dispatcher_num_sms" if sms is not None else "moe_deepep_num_sms"
    sms = sms if sms is not None else get("moe_deepep_num_sms")
    if get("overlap_moe_expert_parallel_comm") is True:
        if not expert_parallel:
            raise ConfigError(f"{where}{spell('overlap_moe_expert_parallel_comm')} needs experts and expert "
                              f"parallelism > 1 (Megatron: \"only supported with expert model parallelism\"); "
                              f"set them or drop it")
        options["overlap_moe_expert_parallel_comm"] = True
        if get("delay_wgrad_compute") is True:
            options["delay_wgrad_compute"] = True
        if sms is not None:
            options["moe_flex_dispatcher_num_sms"] = _int_value(sms, where + spell(sms_key))
        return
    if get("delay_wgrad_compute") is True:   # Megatron refuses it without the overlap
        raise ConfigError(f"{where}{spell('delay_wgrad_compute')} needs {spell('overlap_moe_expert_parallel_comm')} "
                          f"(Megatron: \"overlap_moe_expert_parallel_comm must be enabled when enabling "
                          f"delay_wgrad_compute\"); add it or drop delay-wgrad")
    if sms is not None:
        notes.append(f"{spell(sms_key)} {sms} (no effect without {spell('overlap_moe_expert_parallel_comm')})")
