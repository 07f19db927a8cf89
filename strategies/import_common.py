"""What the importers share (:mod:`strategies.importers`): the :class:`Imported` record, tokenizer
vocabularies, the cluster from the caller, Megatron/NeMo recompute settings, dotted key walks."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from strategies.errors import ConfigError, brief
from strategies.limits import MAX_INT

#: Vocabulary sizes of tokenizers named in recipes (the tokenizer's own vocab; Megatron pads it).
#: GPT-2 BPE 50257 (Radford 2019); Llama 2 / Mistral / Mixtral SentencePiece 32000 (Touvron 2023,
#: HF config.json); Llama 3 tiktoken 128256 (Dubey 2024 Section 2.1 / HF config.json).
#: The Hugging Face tokenizers the NeMo-Framework-Launcher recipes name (launcher_scripts/conf/training,
#: NVIDIA/NeMo-Framework-Launcher 26e42fa), each with its repository's tokenizer/config.json vocab_size:
#: Mistral-7B-v0.1 and Mixtral-8x7B/8x22B-v0.1 32000, Mistral-Large-Instruct-2407 32768,
#: Mistral-Nemo-Base-2407 131072 (Tekken), StarCoder2 49152, Falcon-7B 65024.
#: The longest matching prefix wins (Mistral-Nemo is not Mistral-7B).
TOKENIZER_VOCAB = {"gpt2": 50257, "GPT2BPETokenizer": 50257, "Llama2Tokenizer": 32000, "meta-llama/Llama-2": 32000,
                   "meta-llama/Meta-Llama-3": 128256, "meta-llama/Llama-3": 128256, "meta-llama/Meta-Llama-3.1": 128256,
                   "mistralai/Mistral-7B-v0.1": 32000, "mistralai/Mixtral-8x7B-v0.1": 32000,
                   "mistral-community/Mixtral-8x22B-v0.1": 32000, "mistralai/Mistral-Large-Instruct-2407": 32768,
                   "mistralai/Mistral-Nemo-Base-2407": 131072, "bigcode/starcoder2-tokenizer": 49152,
                   "tiiuae/falcon-7b": 65024}


@dataclass(frozen=True)
class Imported:
    """A strategy mapping built from another tool's configuration."""

    strategy: dict
    """Strategy-file mapping (model, cluster, parallel, schedule, training, options)."""
    unmodeled: tuple
    """Flags or keys the source sets that the simulator does not model, in source order."""
    source: str
    """Which importer made it ('megatron', 'nemo', 'torchtitan')."""
    inputs: tuple = ()
    """Files the import read besides the source itself (e.g. torchtitan's ``hf_assets_path`` config):
    inputs no output of the command may overwrite."""


def named_tokenizer_vocab(name: str | None) -> int | None:
    if not name or not isinstance(name, str):
        return None
    best = max((p for p in TOKENIZER_VOCAB if name.startswith(p)), key=len, default=None)
    return TOKENIZER_VOCAB[best] if best else None


def cluster_mapping(cluster: str | None, nodes: int | None, where: str) -> dict:
    if not cluster:
        raise ConfigError(f"{where}: the cluster is not in the source; give --cluster PRESET (e.g. dgx-h100) "
                          f"and --nodes N")
    if nodes is None:
        raise ConfigError(f"{where}: the number of nodes is not in the source; give --nodes N")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"--nodes = {nodes!r} must be a positive integer")
    return {"preset": cluster, "nodes": nodes}


def recompute_fields(granularity: str | None, method: str | None, num_layers: int | None, layers: int,
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


def walk_keys(d: Any, prefix: str = "") -> list[str]:
    """Dotted names of the leaves of ``d`` that are set (None = not set, not listed)."""
    if isinstance(d, dict):
        out = []
        for k, v in d.items():
            if v is None:
                continue
            out += walk_keys(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]
        return out
    return []


def moe_capacity_options(options: dict, factor: float | None, pad: bool) -> None:
    """Token dropping (--moe-expert-capacity-factor; NeMo moe_expert_capacity_factor): the busiest
    rank processes at most factor x the mean (options.moe_capacity_factor). Padding to capacity
    (--moe-pad-expert-input-to-capacity) makes every expert process exactly factor x the mean, i.e.
    the busiest rank's load is the factor: options.moe_imbalance = factor."""
    if factor is None or factor <= 0:     # None / -1: dropless (Megatron's default)
        return
    options["moe_capacity_factor"] = factor
    if pad:
        options["moe_imbalance"] = max(1.0, factor)


def moe_routing_option(options: dict, force_balance: bool, expert_bias: bool) -> None:
    """Megatron's routing switches -> options.moe_routing (taskgraph/moe_routing.py), unless padding to
    capacity already fixed the load: --moe-router-force-load-balancing (NeMo / Bridge
    moe_router_force_load_balancing) replaces the router's logits by random ones (router.py
    apply_random_logits): 'random'; --moe-router-enable-expert-bias is DeepSeek-V3's
    auxiliary-loss-free bias: 'aux_loss_free'. Neither: the model's learned routing (the default)."""
    if "moe_imbalance" in options:
        return
    if force_balance:
        options["moe_routing"] = "random"
    elif expert_bias:
        options["moe_routing"] = "aux_loss_free"


def _int_value(v: Any, name: str) -> int:
    if isinstance(v, bool) or not str(v).strip().isdigit():
        raise ConfigError(f"{name} = {str(v)[:40]!r} must be a non-negative integer")
    return int(str(v).strip())


#: Megatron-LM --cuda-graph-impl (arguments.py; transformer_config.py cuda_graph_impl) -> options.cuda_graphs
CUDA_GRAPH_IMPLS = {"none": "none", "local": "layers", "transformer_engine": "layers", "full_iteration": "full_iteration"}


def cuda_graph_option(get, spell, options: dict, where: str) -> None:
    """``options.cuda_graphs`` from Megatron-core's CUDA graph settings (taskgraph/cuda_graphs.py), read
    through ``get`` (a field name -> its value) and named with ``spell`` in errors; one source for
    Megatron-LM's flags, NeMo's and Megatron-Bridge's config (NVIDIA/Megatron-LM d98e8a6,
    transformer_config.py __post_init__ and arguments.py validate_args):

    * ``cuda_graph_impl``: ``local`` / ``transformer_engine`` = ``layers`` (per-layer graphs),
      ``full_iteration`` = ``full_iteration``; the deprecated ``enable_cuda_graph`` = ``local`` and
      ``external_cuda_graph`` = ``transformer_engine`` (both at once, or with an impl: refused, as Megatron does);
    * ``cuda_graph_scope`` / ``cuda_graph_modules``: the deprecated value ``full_iteration`` migrates to the
      full-iteration impl; any other scope (a whole layer, attn, mlp, moe_router, ...) is priced as
      per-layer graphs of the whole layer (a partial scope leaves the rest host-issued; not modelled).

    >>> o = {}; cuda_graph_option({"external_cuda_graph": True}.get, str, o, ""); o
    {'cuda_graphs': 'layers'}
    >>> o = {}; cuda_graph_option({"enable_cuda_graph": True, "cuda_graph_scope": "full_iteration"}.get, str, o, ""); o
    {'cuda_graphs': 'full_iteration'}
    """
    on = lambda k: get(k) in (True, "true", "True", 1)
    impl = get("cuda_graph_impl")
    if on("enable_cuda_graph") and on("external_cuda_graph"):
        raise ConfigError(f"{where}{spell('enable_cuda_graph')} and {spell('external_cuda_graph')} are both set, "
                          f"which Megatron-core refuses; keep one")
    if (on("enable_cuda_graph") or on("external_cuda_graph")) and impl not in (None, "none"):
        raise ConfigError(f"{where}{spell('cuda_graph_impl')} = {str(impl)[:40]!r} with the deprecated "
                          f"{spell('enable_cuda_graph')} / {spell('external_cuda_graph')}, which Megatron-core "
                          f"refuses; keep {spell('cuda_graph_impl')}")
    impl = "local" if on("enable_cuda_graph") else "transformer_engine" if on("external_cuda_graph") else impl
    impl = str(impl or "none")
    if impl not in CUDA_GRAPH_IMPLS:
        raise ConfigError(f"{where}{spell('cuda_graph_impl')} = {impl[:40]!r} is not one of "
                          f"{', '.join(CUDA_GRAPH_IMPLS)}")
    scope = get("cuda_graph_scope") or get("cuda_graph_modules") or ()
    scope = [str(x) for x in scope] if isinstance(scope, (list, tuple)) else str(scope).replace(",", " ").split()
    mode = CUDA_GRAPH_IMPLS[impl]
    if mode == "layers" and "full_iteration" in scope:
        mode = "full_iteration"
    if mode != "none":
        options["cuda_graphs"] = mode


def moe_dispatch_options(get, spell, options: dict, notes: list, expert_parallel: bool, where: str,
                         shared: bool = False, dispatcher_default: str | None = None) -> None:
    """The MoE token dispatcher and its overlap, as Megatron-LM's TransformerConfig fields name them
    (``get(field)``: the source's value or None; ``spell(field)``: how the source spells it in a
    note; ``where + spell(field)`` in an error):

    * ``moe_token_dispatcher_type: flex`` with ``moe_flex_dispatcher_backend: deepep`` (the default;
      ``moe_enable_deepep`` is its deprecated spelling): DeepEP's normal kernels send each token over
      RDMA once per destination node, then over NVLink (topologies/moe_dispatch.py), so
      ``options.moe_max_nodes`` = the nodes a token reaches: ``moe_router_group_topk`` (group-limited
      routing) or else its top-k;
    * ``moe_token_dispatcher_type: allgather`` (``dispatcher_default`` when the source leaves it unset:
      Megatron-core's own default, transformer_config.py) = ``options.moe_dispatcher: allgather``
      (MoEAllGatherTokenDispatcher, taskgraph/moe_dispatchers.py);
    * ``overlap_moe_expert_parallel_comm``, ``delay_wgrad_compute`` and the dispatcher's SMs
      (``moe_flex_dispatcher_num_sms``, formerly ``moe_deepep_num_sms``) map one to one;
    * ``moe_shared_expert_overlap`` maps one to one when the model has shared experts (``shared``);
      without them Megatron never calls the overlapped path (moe_layer.py), so it is a note.

    Megatron's own refusals (transformer_config.py __post_init__) are one error here."""
    flex = get("moe_token_dispatcher_type") == "flex"
    if expert_parallel and (get("moe_token_dispatcher_type") or dispatcher_default) == "allgather":
        options["moe_dispatcher"] = "allgather"
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


# ---------------------------------------------------------------------------------- checked reads
#: nodes of a source mapping counted as its aliases and interpolations expand (an honest 8 MB recipe
#: has well under a million); nesting depth of its sections
MAX_SOURCE_NODES = 1_000_000
MAX_SOURCE_DEPTH = 64


def foreach_adam_bytes(adamw: bool, weight_decay: float) -> int:
    """HBM bytes per fp32 parameter element of torch's foreach Adam (torch/optim/adam.py _multi_tensor_adam;
    taskgraph/data/stacks.yaml [TORCH-ADAM]): its seven passes move 72, a weight decay one more pass --
    AdamW's ``_foreach_mul_(params, 1 - lr * wd)`` (read 4, write 4) or Adam's L2 ``_foreach_add(grads,
    params)`` (read 8, write 4). The fused kernel (``fused=True``) moves 28 with either.

    >>> foreach_adam_bytes(False, 0.0), foreach_adam_bytes(True, 0.1), foreach_adam_bytes(False, 0.1)
    (72, 80, 84)
    """
    return 72 + ((8 if adamw else 12) if weight_decay else 0)


def check_expanded_size(data: Any, where: str, limit: int = MAX_SOURCE_NODES) -> int:
    """The number of nodes ``data`` has once every shared container (a YAML alias, a resolved
    interpolation) is counted at each place it appears; one error when that passes ``limit``, when
    a container holds itself, or when nesting passes ``MAX_SOURCE_DEPTH``. Each container is visited
    once (sizes memoised by identity), so an alias bomb is refused in the time of its text.

    >>> a = [1, 2]
    >>> check_expanded_size({"x": [a, a]}, "recipe")
    8
    """
    size: dict = {}
    stack: list = [(data, 0, False)]
    open_: set = set()
    while stack:
        v, depth, done = stack.pop()
        if not isinstance(v, (dict, list)):
            continue
        kids = list(v.values()) if isinstance(v, dict) else v
        if done:
            open_.discard(id(v))
            n = 1 + sum(size.get(id(k), 1) for k in kids)
            if n > limit:
                raise ConfigError(f"{where}: the file expands to more than {limit:,} values once its aliases "
                                  f"(&/*) and interpolations are followed; write the values out")
            size[id(v)] = n
            continue
        if id(v) in size:
            continue
        if id(v) in open_:
            raise ConfigError(f"{where}: a section contains itself (a YAML alias or interpolation that refers to "
                              f"its own parent); write the values out")
        if depth > MAX_SOURCE_DEPTH:
            raise ConfigError(f"{where}: sections nest deeper than {MAX_SOURCE_DEPTH} levels; no recipe does, "
                              f"check the file")
        open_.add(id(v))
        stack.append((v, depth, True))
        stack.extend((k, depth + 1, False) for k in kids if isinstance(k, (dict, list)))
    return size.get(id(data), 1)


def _unresolved(v: Any) -> str:
    if isinstance(v, str) and "${" in v:
        return (" is an interpolation execsim could not resolve (it names a key the file does not set, a "
                "resolver other than multiply and sum, or itself); write the value")
    return ""


class Fields:
    """Typed reads of one section of a source: every wrong type or value is one :class:`ConfigError`
    naming the field (``where`` + ``prefix`` + key), the value and the fix. A value of ``None`` (a
    YAML ``null``) reads as the default, as NeMo's ``cfg.get(key, default)`` would not but its
    recipes mean it (``null`` = not set).

    >>> f = Fields({"tp": "abc"}, "nemo recipe: ", "model.")
    >>> f.integer("tp", 1)
    Traceback (most recent call last):
    ...
    strategies.errors.ConfigError: nemo recipe: model.tp = 'abc' must be an integer from 1 to 9007199254740992
    """

    def __init__(self, data: Any, where: str, prefix: str = ""):
        self.data = data if isinstance(data, dict) else {}
        self.where, self.prefix = where, prefix

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def fail(self, key: str, value: Any, need: str) -> ConfigError:
        why = _unresolved(value)
        return ConfigError(f"{self.where}{self.name(key)} = {brief(value, 60)}" + (why or f" {need}"))

    def get(self, key: str, default: Any = None) -> Any:
        v = self.data.get(key)
        return default if v is None else v

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def section(self, key: str) -> Fields:
        """The sub-mapping ``key`` (absent or null: empty); anything else is refused."""
        v = self.data.get(key)
        if v is not None and not isinstance(v, dict):
            raise self.fail(key, v, "must be a section (a mapping of keys); write it as one, or remove it")
        return Fields(v or {}, self.where, f"{self.name(key)}.")

    def integer(self, key: str, default: Any = None, lo: int = 1, hi: int = MAX_INT, extra: tuple = ()) -> Any:
        v = self.data.get(key)
        if v is None:
            return default
        if v in extra and not isinstance(v, bool):
            return v
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            alt = "".join(f" or {e}" for e in extra)
            raise self.fail(key, v, f"must be an integer from {lo} to {hi}{alt}")
        return v

    def number(self, key: str, default: Any = None, lo: float = 0.0, hi: float = float(MAX_INT)) -> Any:
        v = self.data.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and lo <= v <= hi):
            raise self.fail(key, v, f"must be a finite number from {lo:g} to {hi:g}")
        return v

    def flag(self, key: str, default: Any = None) -> Any:
        v = self.data.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.fail(key, v, "must be true or false")
        return v

    def text(self, key: str, default: Any = None) -> Any:
        v = self.data.get(key)
        if v is None:
            return default
        if not isinstance(v, str) or "${" in v:
            raise self.fail(key, v, "must be a name (text)")
        return v

    def choice(self, key: str, default: Any, choices) -> Any:
        """A name from ``choices`` (numbers are read as their text, as YAML may give ``16`` for '16')."""
        v = self.data.get(key)
        if v is None:
            return default
        text = str(v) if isinstance(v, (str, int)) and not isinstance(v, bool) else None
        if text is None or text not in choices:
            from strategies.config import did_you_mean
            raise self.fail(key, v, f"is not one of {', '.join(map(str, choices))}"
                                    f"{did_you_mean(str(v), choices) if isinstance(v, str) else ''}")
        return text
