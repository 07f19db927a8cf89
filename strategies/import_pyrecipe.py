"""NeMo 2 and Megatron-Bridge recipes (Python, read statically by :mod:`strategies.pyrecipe`) and
Megatron-Bridge's saved ``ConfigContainer`` YAML -> a strategy mapping (see :mod:`strategies.importers`).

Both frameworks hand Megatron-core's ``TransformerConfig`` field names through unchanged, so one map
reads the model, parallel and precision fields wherever each framework keeps them
(:data:`LAYOUTS`). Megatron-core's own defaults for fields a recipe leaves unset are the
``TransformerConfig`` / ``DistributedDataParallelConfig`` dataclass defaults (NVIDIA/Megatron-LM
``megatron/core/transformer/transformer_config.py``, ``megatron/core/model_parallel_config.py``,
``megatron/core/distributed/distributed_data_parallel_config.py``): add_bias_linear True,
add_qkv_bias False, gated_linear_unit False, activation gelu, normalization LayerNorm,
hidden/attention dropout 0.1, num_query_groups = heads, ffn 4h, moe_router_topk 2, overlap_grad_reduce
and overlap_param_gather False, sequence_parallel False, parallel sizes 1.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from strategies.errors import ConfigError
from strategies.import_common import (
    Imported,
    cuda_graph_option,
    moe_dispatch_options,
    moe_routing_option,
    named_tokenizer_vocab,
    recompute_fields,
)
from strategies.import_peft import tree_lora
from strategies.optimizer_dtypes import OPTIMIZER_DTYPE_CHOICES, TORCH_DTYPE_NAMES, imported_optimizer_dtypes
from strategies.pyrecipe import Ref, Unknown, evaluate_recipe, parse_recipe, recipe_functions, short
from strategies.pyrecipe_values import plain

#: Where each framework keeps the sections: model fields, parallel sizes, DDP, precision, data,
#: optimizer, run size (dotted paths in the recipe's configuration tree).
LAYOUTS = {
    "nemo": {"model": "model.config", "parallel": "trainer.strategy", "ddp": "trainer.strategy.ddp",
             "precision": "trainer.plugins", "batch": "data", "seq": "data.seq_length",
             "steps": "trainer.max_steps", "dist_opt": "optim.config.use_distributed_optimizer",
             "nodes": "trainer.num_nodes", "devices": "trainer.devices", "tokenizer": "data.tokenizer",
             "optim": "optim.config"},
    "bridge": {"model": "model", "parallel": "model", "ddp": "ddp", "precision": "mixed_precision",
               "batch": "train", "seq": "dataset.seq_length", "steps": "train.train_iters",
               "dist_opt": "ddp.use_distributed_optimizer", "nodes": None, "devices": None,
               "tokenizer": "tokenizer", "optim": "optimizer"},
}
#: Megatron's FP8 recipes (TransformerConfig.fp8_recipe) -> options.fp8_recipe
FP8_RECIPES = {"delayed": "delayed", "tensorwise": "tensorwise", "mxfp8": "mxfp8", "blockwise": "blockwise"}
_MISSING = object()
_GPUS_IN_NAME = re.compile(r"_(\d+)gpu_")


def recipe_size(function: str) -> int | None:
    """GPUs a Megatron-Bridge recipe is sized for, from its name as Bridge's scripts parse it
    (``llama3_70b_pretrain_32gpu_h100_bf16_config`` -> 32); None when the name does not say.

    >>> recipe_size("llama3_70b_pretrain_32gpu_h100_bf16_config"), recipe_size("pretrain_config")
    (32, None)
    """
    m = _GPUS_IN_NAME.search(function + "_")
    return int(m.group(1)) if m else None


def pick_function(kind: str, names: list[str], path: str) -> str:
    """The recipe function of a file when ``--recipe`` is not given: NeMo's ``pretrain_recipe``, or
    the file's only pretraining ``..._config`` function."""
    if kind == "nemo" and "pretrain_recipe" in names:
        return "pretrain_recipe"
    cands = [n for n in names if not n.startswith("_") and n.endswith(("_config", "_recipe")) and "pretrain" in n]
    if len(cands) == 1:
        return cands[0]
    listed = ", ".join(n for n in names if not n.startswith("_"))[:400]
    raise ConfigError(f"{path}: which recipe? give --recipe FUNCTION (this file defines: {listed or 'no functions'})")


class Tree:
    """Dotted reads of a recipe's configuration tree, with errors that name the key and its --set."""

    def __init__(self, tree: Any, where: str):
        self.tree, self.where = tree, where

    def raw(self, path: str) -> Any:
        v = self.tree
        for k in path.split("."):
            if isinstance(v, Unknown):
                return v
            if isinstance(v, dict) and k not in v and "_opaque_" in v:   # an unknown function's result
                return Unknown(f"{short(str(v.get('_target_', '?')))}() (defined in another file execsim has not "
                               f"read: run the import on the recipe inside its checkout, where that file is read too)",
                               v["_opaque_"])
            if not isinstance(v, dict) or k not in v:
                return _MISSING
            v = v[k]
        return v

    def get(self, path: str, kind: type | tuple | None, default: Any = None, *, required: bool = False) -> Any:
        v = self.raw(path)
        if isinstance(v, Unknown):
            raise ConfigError(f"{self.where}: {path} is not known without running the recipe ({v.where} sets it from "
                              f"{v.what[:100]}); give --set {path}=VALUE")
        if v is _MISSING or v is None:
            if required:
                raise ConfigError(f"{self.where}: the recipe does not set {path}; give --set {path}=VALUE")
            return default
        if isinstance(v, Ref):
            v = short(v.name)
        if isinstance(v, dict) and "_target_" in v and kind is str:   # a function given as a value
            v = short(str(v["_target_"]))
        if kind is None:
            return v
        if kind is int and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ConfigError(f"{self.where}: {path} = {str(v)[:40]!r} must be a non-negative integer; "
                              f"give --set {path}=N")
        if kind is bool and not isinstance(v, bool):
            raise ConfigError(f"{self.where}: {path} = {str(v)[:40]!r} must be true or false")
        if kind is float and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ConfigError(f"{self.where}: {path} = {str(v)[:40]!r} must be a number")
        if kind is str and not isinstance(v, str):
            raise ConfigError(f"{self.where}: {path} = {str(v)[:40]!r} must be a string")
        return v


def apply_sets(tree: dict, sets: dict, where: str) -> None:
    """``--set a.b.c=VALUE``: write VALUE at that path of the configuration tree (made if absent)."""
    for key, value in sets.items():
        parts = key.split(".")
        node = tree
        for k in parts[:-1]:
            nxt = node.get(k)
            if not isinstance(nxt, dict):
                nxt = {} if nxt is None or isinstance(nxt, Unknown) or nxt is _MISSING else None
                if nxt is None:
                    raise ConfigError(f"--set {key}: {k} is a value, not a section, in {where}")
                node[k] = nxt
            node = nxt
        node[parts[-1]] = value


def _mlp(t: Tree, m: str) -> str:
    """Megatron: gated_linear_unit + activation_func (silu -> SwiGLU, gelu -> GEGLU; Shazeer 2020)."""
    gated = t.get(f"{m}.gated_linear_unit", bool, False)
    act = str(t.get(f"{m}.activation_func", str, "gelu")).lower()
    act = act.rsplit(".", 1)[-1]
    if act in ("silu", "swish") and gated:
        return "swiglu"
    if act in ("gelu", "fast_gelu", "openai_gelu", "quick_gelu"):
        return "geglu" if gated else "gelu"
    raise ConfigError(f"{t.where}: {m}.activation_func = {act!r}{' with gated_linear_unit' if gated else ''} is not "
                      f"modeled (execsim models gelu, SwiGLU and GEGLU MLPs); give --set {m}.activation_func=silu "
                      f"to simulate it as SwiGLU")


def model_fields(t: Tree, m: str, vocab: int) -> dict:
    """The execsim model from Megatron TransformerConfig fields under ``m``."""
    g = t.get
    layers, h, heads = g(f"{m}.num_layers", int, required=True), g(f"{m}.hidden_size", int, required=True), \
        g(f"{m}.num_attention_heads", int, required=True)
    norm = str(g(f"{m}.normalization", str, "LayerNorm"))
    if norm.lower() not in ("rmsnorm", "layernorm"):
        raise ConfigError(f"{t.where}: {m}.normalization = {norm!r} must be LayerNorm or RMSNorm")
    pos = str(g(f"{m}.position_embedding_type", str, "learned_absolute"))
    if pos not in ("rope", "learned_absolute", "yarn"):
        raise ConfigError(f"{t.where}: {m}.position_embedding_type = {pos!r} is not modeled (rope, yarn, "
                          f"learned_absolute); give --set {m}.position_embedding_type=rope")
    bias = g(f"{m}.add_bias_linear", bool, True)
    seq = g(f"{m}.seq_length", int, None)
    model = {"name": "recipe", "layers": layers, "hidden": h, "heads": heads,
             "kv_heads": g(f"{m}.num_query_groups", int, None) or heads,
             "ffn": g(f"{m}.ffn_hidden_size", int, None) or 4 * h, "vocab": vocab, "mlp": _mlp(t, m),
             "norm": norm.lower(), "position": "learned" if pos == "learned_absolute" else "rope",
             "tied_embeddings": g(f"{m}.share_embeddings_and_output_weights", bool, True), "bias": bias,
             # Megatron's linear_qkv: bias = add_bias_linear or add_qkv_bias (transformer/attention.py)
             "qkv_bias": bias or g(f"{m}.add_qkv_bias", bool, False),
             "dropout": (g(f"{m}.hidden_dropout", float, 0.1) or 0) > 0 or (g(f"{m}.attention_dropout", float, 0.1) or 0) > 0}
    # learned positions: the table's size (max_position_embeddings); RoPE: the context the model is set to
    max_seq = g(f"{m}.max_position_embeddings", int, None) or seq if pos == "learned_absolute" else \
        seq or g(f"{m}.max_position_embeddings", int, None)
    if max_seq:
        model["max_seq"] = max_seq
    if g(f"{m}.kv_channels", int, None):
        model["head_dim"] = g(f"{m}.kv_channels", int)
    if g(f"{m}.qk_layernorm", bool, False):
        model["qk_norm"] = True
    experts = g(f"{m}.num_moe_experts", int, 0) or 0
    if experts:
        eff = g(f"{m}.moe_ffn_hidden_size", int, None) or model["ffn"]
        model.update(experts=experts, top_k=g(f"{m}.moe_router_topk", int, 2), expert_ffn=eff)
        shared = g(f"{m}.moe_shared_expert_intermediate_size", int, 0) or 0
        if shared:
            if shared % eff:
                raise ConfigError(f"{t.where}: {m}.moe_shared_expert_intermediate_size = {shared} is not a multiple of "
                                  f"the expert size {eff}")
            model["shared_experts"] = shared // eff
        freq = g(f"{m}.moe_layer_freq", None, 1)
        if isinstance(freq, list):     # Megatron: a 0/1 flag per layer
            if len(freq) != layers or any(x not in (0, 1) for x in freq):
                raise ConfigError(f"{t.where}: {m}.moe_layer_freq must list 0 or 1 for each of the {layers} layers")
            model["moe_layers"] = [i for i, x in enumerate(freq) if x == 1]
        elif isinstance(freq, int) and not isinstance(freq, bool) and freq > 1:
            model["moe_layers"] = freq
        elif freq != 1:
            raise ConfigError(f"{t.where}: {m}.moe_layer_freq = {str(freq)[:40]!r} must be a positive integer or a list")
        if g(f"{m}.moe_router_enable_expert_bias", bool, False):
            model["router_bias"] = True
    if g(f"{m}.multi_latent_attention", bool, False):
        # Megatron MLATransformerConfig: the query/key width per head is qk_head_dim + qk_pos_emb_head_dim
        rope, nope = g(f"{m}.qk_pos_emb_head_dim", int, 64), g(f"{m}.qk_head_dim", int, 128)
        model.update(attention="mla", q_lora_rank=g(f"{m}.q_lora_rank", int, 0) or 0,
                     kv_lora_rank=g(f"{m}.kv_lora_rank", int, 512), qk_rope_head_dim=rope,
                     head_dim=nope + rope, v_head_dim=g(f"{m}.v_head_dim", int, 128))
    mtp = g(f"{m}.mtp_num_layers", int, 0) or 0
    if mtp:
        model["mtp_layers"] = mtp
    window = g(f"{m}.window_size", None, None)
    if window is not None:
        w = window[0] if isinstance(window, (list, tuple)) and window else window
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise ConfigError(f"{t.where}: {m}.window_size = {str(window)[:40]!r} must be (left, right) token counts")
        if w > 0:
            model["sliding_window"] = w
    return model


def tokenizer_vocab(t: Tree, kind: str, m: str, vocab: int | None) -> int:
    """The vocabulary the run trains with (before Megatron pads it).

    Megatron-Bridge (training/setup.py:744-780 at the table's commit): the tokenizer's size when
    ``tokenizer.use_tokenizer_vocab_size`` (its pretraining recipes) or the model's is unset, else the
    model's. NeMo 2: the data module's tokenizer (MockDataModule without one: GPT-2 BPE, mock.py:83-90)."""
    if vocab:
        return vocab
    lay = LAYOUTS[kind]
    tok = t.raw(lay["tokenizer"])
    model_v = t.get(f"{m}.vocab_size", int, None)
    tok_v = None
    if kind == "bridge" and isinstance(tok, dict):
        tok_v = t.get("tokenizer.vocab_size", int, None) if tok.get("tokenizer_type") == "NullTokenizer" else \
            named_tokenizer_vocab(t.get("tokenizer.tokenizer_model", str, None))
        if t.get("tokenizer.use_tokenizer_vocab_size", bool, False) or model_v is None:
            model_v = None
    elif kind == "nemo":     # a preset model vocab_size wins over the tokenizer's (gpt/model/base.py:372-380)
        name = tok
        if isinstance(tok, dict):
            args = tok.get("_args_") or []
            name = args[0] if args else tok.get("pretrained_model_name") or tok.get("model_name")
        tok_v = named_tokenizer_vocab(name if isinstance(name, str) else None)
    v = model_v or tok_v
    if not v:
        raise ConfigError(f"{t.where}: the vocabulary size is not known from the recipe's tokenizer "
                          f"({lay['tokenizer']}); give --vocab N")
    return v


def precision_fields(t: Tree, kind: str, options: dict) -> str:
    """training.precision (+ options.fp8_recipe / fp8_param_gather) from the mixed-precision config."""
    p = LAYOUTS[kind]["precision"]
    node = t.raw(p)
    if isinstance(node, str):        # Bridge: a recipe name (get_mixed_precision_config)
        from strategies.recipe_table import recipe_table
        table = recipe_table()["entries"]["get_mixed_precision_config"]["returns"]
        if node not in table:
            raise ConfigError(f"{t.where}: {p} = {node!r} is not a mixed-precision recipe execsim knows "
                              f"({', '.join(table)}); give --set {p}=bf16_mixed")
        t = Tree({"mp": table[node]}, t.where)
        p = "mp"
    elif node is _MISSING or node is None:
        return "bf16"
    fp8 = t.get(f"{p}.fp8", None, None)
    prec = str(t.get(f"{p}.precision", None, "") or "")
    fp16 = t.get(f"{p}.fp16", bool, False) or prec in ("16-mixed", "16")
    if fp8:
        recipe = str(t.get(f"{p}.fp8_recipe", str, "delayed"))
        if recipe not in FP8_RECIPES:
            raise ConfigError(f"{t.where}: {p}.fp8_recipe = {recipe!r} is not modeled ({', '.join(FP8_RECIPES)})")
        options["fp8_recipe"] = FP8_RECIPES[recipe]
        if t.get(f"{p}.fp8_param_gather", bool, False):
            options["fp8_param_gather"] = True
        return "fp8"
    if not (fp16 or t.get(f"{p}.bf16", bool, False) or prec.startswith("bf16")):
        raise ConfigError(f"{t.where}: {p} trains in FP32, which execsim does not model; give --set {p}=bf16_mixed")
    return "fp16" if fp16 else "bf16"


def precision_aware_fields(t: Tree, kind: str, options: dict) -> None:
    """``options.optimizer_dtypes`` from Megatron-core's ``OptimizerConfig`` (Bridge ``cfg.optimizer``, NeMo 2
    ``optim.config``): ``use_precision_aware_optimizer`` and ``main_grads_dtype`` / ``main_params_dtype`` /
    ``exp_avg_dtype`` / ``exp_avg_sq_dtype`` as torch dtypes (Megatron-Bridge 067f987d
    perf_recipes/deepseek/common.py ``_enable_deepseek_precision_aware_optimizer``). A field the recipe
    leaves unset is Megatron-core's default (optimizer_config.py d98e8a6: False, torch.float32 each)."""
    o = LAYOUTS[kind]["optim"]
    node = t.raw(o)
    if not isinstance(node, dict):
        return

    def given(k: str) -> bool:   # set in the recipe (an unread helper's optimizer holds only what it sets)
        return node.get(k) is not None

    switch = given("use_precision_aware_optimizer") and t.get(f"{o}.use_precision_aware_optimizer", bool)
    dtypes = {}
    for k, choices in OPTIMIZER_DTYPE_CHOICES.items():
        if not given(f"{k}_dtype"):
            continue
        v = t.get(f"{o}.{k}_dtype", str)
        name = TORCH_DTYPE_NAMES.get(short(v))
        if name not in choices:
            torch_names = [f"torch.{n}" for n, c in TORCH_DTYPE_NAMES.items() if c in choices]
            raise ConfigError(f"{t.where}: {o}.{k}_dtype = {v[:40]!r} is not one of {', '.join(torch_names)}; "
                              f"give --set {o}.{k}_dtype=torch.float32")
        dtypes[k] = name
    imported_optimizer_dtypes(bool(switch), dtypes, lambda k: f"{t.where}: {o}.{k}_dtype", options,
                              f"{o}.use_precision_aware_optimizer = True")


def tree_to_strategy(tree: dict, kind: str, where: str, *, cluster: str | None, nodes: int | None,
                     vocab: int | None, gpus: int | None, saved: bool = False) -> tuple[dict, list]:
    """The strategy mapping of a NeMo 2 / Megatron-Bridge configuration tree, and the notes on what
    it sets that execsim does not model. ``gpus``: the recipe's own size when its name says."""
    lay = LAYOUTS[kind]
    t = Tree(tree, where)
    m, par, ddp = lay["model"], lay["parallel"], lay["ddp"]
    node = t.raw(m)
    if not isinstance(node, dict) or "_opaque_" in node:
        u = node if not isinstance(node, dict) else Unknown(
            f"{'.'.join(str(node.get('_target_', '?')).split('.')[-2:])} (a call of a function defined in another "
            f"file execsim has not read: run the import on the recipe inside its checkout, where that file is read "
            f"too)", node["_opaque_"])
        raise ConfigError(f"{where}: the recipe's model ({m}) is not known without running it"
                          + (f" ({u.where}: {u.what[:160]})" if isinstance(u, Unknown) else "")
                          + f"; give its fields with --set {m}.num_layers=N --set {m}.hidden_size=H ...")
    refuse_family(t, m, kind, where)
    if not saved and "_target_" in node and not node.get("_known_") and node.get("num_layers") is None:
        from strategies.recipe_table import TABLE_PATH
        raise ConfigError(f"{where}: the model config {short(str(node['_target_']))} is not in execsim's table of "
                          f"framework defaults ({TABLE_PATH.name}); give its fields with --set {m}.num_layers=N "
                          f"--set {m}.hidden_size=H --set {m}.num_attention_heads=A ... or import a strategy file")
    v = tokenizer_vocab(t, kind, m, vocab)
    model = model_fields(t, m, v)
    tp, pp = t.get(f"{par}.tensor_model_parallel_size", int, 1) or 1, t.get(f"{par}.pipeline_model_parallel_size", int, 1) or 1
    vpp = t.get(f"{par}.virtual_pipeline_model_parallel_size", int, None) or 1
    cp, ep = t.get(f"{par}.context_parallel_size", int, 1) or 1, t.get(f"{par}.expert_model_parallel_size", int, 1) or 1
    fsdp = t.get(f"{ddp}.use_megatron_fsdp", bool, False)
    dist = t.get(lay["dist_opt"], bool, False)
    parallel = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "sp": bool(t.get(f"{par}.sequence_parallel", bool, False)) and tp > 1,
                "zero": 3 if fsdp else 1 if dist else 0}
    etp = t.get(f"{par}.expert_tensor_parallel_size", int, None)
    if etp is not None and model.get("experts") and etp != tp:
        parallel["etp"] = etp
    layout = t.get(f"{par}.pipeline_model_parallel_layout", None, None)
    lps = None
    if layout is not None:   # Megatron-core: the layout fixes the stages, vpp = its stages / pp
        lps = layout_stages(layout, model["layers"], pp, f"{where}: {par}")
        vpp = len(lps) // pp
    if vpp > 1:
        parallel["vpp"] = vpp
    lps = lps or stage_layers(t, par, model["layers"], pp, vpp)
    if lps:
        parallel["layers_per_stage"] = lps
    options: dict = {"overlap_grad_reduce": t.get(f"{ddp}.overlap_grad_reduce", bool, False),
                     "overlap_param_gather": t.get(f"{ddp}.overlap_param_gather", bool, False) and parallel["zero"] > 0,
                     "flash_attention": True}
    precision = precision_fields(t, kind, options)
    g32 = t.get(f"{lay['precision']}.grad_reduce_in_fp32", bool, None) if isinstance(t.raw(lay["precision"]), dict) \
        else None
    g32 = t.get(f"{ddp}.grad_reduce_in_fp32", bool, False) if g32 is None else g32
    options["fp32_grad_accum"] = g32
    precision_aware_fields(t, kind, options)
    notes: list = []
    if kind == "nemo" and t.raw("data.tokenizer") == "GPT2BPETokenizer" and not vocab:
        notes.append("data.tokenizer: none given, so NeMo's MockDataModule runs GPT-2 BPE (vocab 50257, "
                     "mock.py:83-90); give --vocab N for the model's own tokenizer")
    tp_overlap = tp_comm_overlap(t, kind)
    if tp_overlap and tp > 1 and parallel["sp"]:
        options["tp_comm_overlap"] = True
    elif tp_overlap:
        notes.append("tp_comm_overlap (no effect without tp > 1 and sequence parallelism)")
    if t.get(f"{m}.cpu_offloading", bool, False) and t.get(f"{m}.cpu_offloading_num_layers", int, 0):
        options["activation_offload_layers"] = t.get(f"{m}.cpu_offloading_num_layers", int)
    # the loss (taskgraph/data/stacks.yaml [MEG-CE]): Megatron-Bridge's GPTModelProvider and NeMo 2's GPTConfig
    # default cross_entropy_loss_fusion to True, Megatron-core's cross_entropy_fusion_impl to 'native'; False
    # runs Megatron-core's eager fp32 loss
    impl = t.get(f"{m}.cross_entropy_fusion_impl", str, "native")
    if impl not in ("native", "te"):
        raise ConfigError(f"{where}: {m}.cross_entropy_fusion_impl = {impl[:40]!r} is not one of native, te")
    options["cross_entropy"] = impl if t.get(f"{m}.cross_entropy_loss_fusion", bool, True) else "eager-fp32"
    # Megatron-Bridge keeps the MoE overlap switches in comm_overlap (CommOverlapConfig), NeMo in the model
    in_overlap = ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute")
    overlap_cfg = kind == "bridge" and isinstance(t.raw("comm_overlap"), dict)

    def moe_key(k: str) -> str:
        if overlap_cfg and k in in_overlap and t.get(f"{m}.{k}", None, None) is None:
            return f"comm_overlap.{k}"
        return f"{m}.{k}"
    moe_dispatch_options(lambda k: t.get(moe_key(k), None, None), moe_key, options, notes,
                         bool(model.get("experts")) and ep > 1, f"{where}: ", shared=bool(model.get("shared_experts")))
    if model.get("experts"):   # the expert bias already sets model.router_bias ('learned' follows it)
        moe_routing_option(options, t.get(f"{m}.moe_router_force_load_balancing", bool, False) is True, False)
    batch = lay["batch"]
    seq = t.get(lay["seq"], int, None) or t.get(f"{m}.seq_length", int, None)
    if not seq:
        raise ConfigError(f"{where}: the sequence length is not in the recipe; give --set {lay['seq']}=N")
    training = {"micro_batch": t.get(f"{batch}.micro_batch_size", int, required=True) or 1,
                "global_batch": t.get(f"{batch}.global_batch_size", int, required=True), "seq_len": seq,
                "precision": precision}
    training.update(recompute_fields(t.get(f"{m}.recompute_granularity", str, None), t.get(f"{m}.recompute_method", str, None),
                               t.get(f"{m}.recompute_num_layers", int, None), model["layers"], pp * vpp,
                               f"{where}: {m}.recompute"))
    lora = tree_lora(t, notes)   # ConfigContainer.peft / recipe.peft (strategies/import_peft.py)
    if lora is not None:
        training["lora"] = lora
    steps = t.get(lay["steps"], None, None)
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        training["train_tokens"] = float(steps) * training["global_batch"] * seq
    val = t.get(f"{m}.fine_grained_activation_offloading", None, None)
    if val not in (None, False, "none"):
        notes.append(f"{m}.fine_grained_activation_offloading {val}")
    cuda_graph_option(lambda k: t.get(f"{m}.{k}", None, None), lambda k: f"{m}.{k}", options, f"{where}: ")
    strategy = {"model": model, "parallel": parallel, "schedule": "interleaved-1f1b" if vpp > 1 else "1f1b",
                "training": training, "options": options}
    n = nodes if nodes is not None else (t.get(lay["nodes"], int, None) if lay["nodes"] else None)
    if not cluster:
        raise ConfigError(f"{where}: the cluster is not in the recipe; give --cluster PRESET (e.g. dgx-h100)")
    strategy["cluster"] = {"preset": cluster, "nodes": n}
    if lay["devices"] and t.get(lay["devices"], int, None) is not None:
        strategy["_gpus_per_node"] = t.get(lay["devices"], int)
    if gpus is not None and nodes is None:
        strategy["_recipe_gpus"] = gpus
    elif n is None:
        raise ConfigError(f"{where}: the number of nodes is not in the recipe; give --nodes N")
    return strategy, notes


#: model classes a recipe's fields cannot describe to execsim -> why (the model wrapper's or config's name)
REFUSED_FAMILIES = (
    (re.compile(r"Bert|T5|Mamba|Hyena|NemotronH|Nano\w*v2|Evo2"), ("is not a decoder-only transformer execsim models "
     "(BERT/T5 encoders, Mamba/Hyena state-space layers): not supported")),
    (re.compile(r"Gemma[23]"), ("alternates local and global attention, soft-caps logits and adds sandwich norms in "
     "its layer spec, which the recipe's fields do not show: write a strategy file with the model preset (e.g. "
     "model: gemma2-27b) and the recipe's parallel settings")),
    (re.compile(r"Llama4"), ("uses chunked attention and no-RoPE layers set in its layer spec, which the recipe's fields "
     "do not show: not supported from a recipe; write a strategy file")),
)


def refuse_family(t: Tree, m: str, kind: str, where: str) -> None:
    names = [str(t.raw(f"{m}._target_")), str(t.raw("model._target_")) if kind == "nemo" else ""]
    for pattern, why in REFUSED_FAMILIES:
        for name in names:
            if pattern.search(short(name)):
                raise ConfigError(f"{where}: the model {short(name)} {why}")


_UNROLL = (re.compile(r"\(([^)]+)\)\*(\d+)"), re.compile(r"(.)\*(\d+)"))


def layout_stages(layout: Any, layers: int, stages: int, where: str) -> list:
    """Transformer layers per virtual stage (a multiple of ``stages`` = pp of them) of Megatron-core's
    ``pipeline_model_parallel_layout``
    (transformer/pipeline_parallel_layer_layout.py parse_str_to_list at Megatron-LM d98e8a64: commas
    are cosmetic, ``(...)*n`` and ``x*n`` unroll, ``|`` separates stages, ``t`` is a decoder layer;
    ``E``, ``L``, ``m`` the embedding, loss and MTP), unrolled within a bound checked as it grows."""
    if isinstance(layout, list):
        counts = [sum(1 for x in st if str(x).rsplit(".", 1)[-1] in ("t", "decoder")) if isinstance(st, list) else -1
                  for st in layout]
    else:
        text = str(layout).replace(",", "")
        for pattern in _UNROLL:
            def unroll(mt: re.Match) -> str:
                n = int(mt.group(2))
                if n * len(mt.group(1)) > 1_000_000:
                    raise ConfigError(f"{where}: pipeline_model_parallel_layout unrolls to over 1,000,000 characters")
                return mt.group(1) * n
            text = pattern.sub(unroll, text)
            if len(text) > 1_000_000:
                raise ConfigError(f"{where}: pipeline_model_parallel_layout unrolls to over 1,000,000 characters")
        bad = set(text) - set("EtLm|")
        if bad:
            raise ConfigError(f"{where}: pipeline_model_parallel_layout {str(layout)[:60]!r} has {min(bad)!r}, not "
                              f"a layer Megatron knows (E, t, L, m)")
        counts = [st.count("t") for st in text.split("|")]
    if len(counts) % stages or sum(counts) != layers or min(counts) < 0:
        raise ConfigError(f"{where}: pipeline_model_parallel_layout {str(layout)[:60]!r} gives {len(counts)} stages "
                          f"holding {sum(counts)} layers; a multiple of pp = {stages} stages (Megatron derives the virtual "
                          f"pipeline size from it) holding the model's {layers} layers is needed")
    return counts


def stage_layers(t: Tree, par: str, layers: int, pp: int, vpp: int) -> list | None:
    """Transformer layers per (virtual) pipeline stage when the recipe splits them unevenly, as
    Megatron-core does (transformer/transformer_block.py get_num_layers_to_build, transformer_config.py):
    ``num_layers_in_first/last_pipeline_stage`` fix the first/last stage and the others split the rest
    evenly; ``account_for_embedding/loss_in_pipeline_split`` count the embedding and the loss as one
    layer each of the first and last virtual stage. None: an even split."""
    first = t.get(f"{par}.num_layers_in_first_pipeline_stage", int, None)
    last = t.get(f"{par}.num_layers_in_last_pipeline_stage", int, None)
    emb = t.get(f"{par}.account_for_embedding_in_pipeline_split", bool, False)
    loss = t.get(f"{par}.account_for_loss_in_pipeline_split", bool, False)
    if pp == 1 or not (first is not None or last is not None or emb or loss):
        return None
    if first is not None or last is not None:
        if vpp > 1 or emb or loss:
            raise ConfigError(f"{t.where}: {par}.num_layers_in_first/last_pipeline_stage with virtual pipelining or "
                              f"account_for_*_in_pipeline_split is not modeled; give --set {par}.layers_per_stage "
                              f"in a strategy file instead")
        inner = pp - (first is not None) - (last is not None)
        rest = layers - (first or 0) - (last or 0)
        if rest < 0 or (inner and rest % inner) or (not inner and rest):
            raise ConfigError(f"{t.where}: {layers} layers minus the first ({first}) and last ({last}) stage layers do "
                              f"not split evenly over the other {inner} pipeline stages (Megatron refuses it)")
        return ([first] if first is not None else []) + [rest // inner] * inner + ([last] if last is not None else [])
    stages = pp * vpp
    total = layers + emb + loss
    if total % stages:
        raise ConfigError(f"{t.where}: {layers} layers + {int(emb) + int(loss)} (embedding/loss counted by "
                          f"account_for_*_in_pipeline_split) = {total} do not split evenly over pp*vpp = {stages} "
                          f"stages (Megatron refuses it)")
    per = total // stages
    lps = [per] * stages
    lps[0] -= int(emb)
    lps[-1] -= int(loss)
    return lps


def tp_comm_overlap(t: Tree, kind: str) -> bool:
    """NeMo 2: a MegatronCommOverlapCallback with tp_comm_overlap; Bridge: comm_overlap.tp_comm_overlap."""
    if kind == "bridge":
        return bool(t.get("comm_overlap.tp_comm_overlap", bool, False)) if isinstance(t.raw("comm_overlap"), dict) else False
    cbs = t.raw("trainer.callbacks")
    if not isinstance(cbs, list):
        return False
    return any(isinstance(c, dict) and short(str(c.get("_target_", ""))) == "MegatronCommOverlapCallback"
               and c.get("tp_comm_overlap") is True for c in cbs)


def split_sets(sets: dict | None) -> tuple[dict, dict]:
    """``--set`` items: NAME=VALUE (a recipe function's argument) and a.b=VALUE (a configuration field)."""
    args, fields = {}, {}
    for k, val in (sets or {}).items():
        (fields if "." in k else args)[k] = val
    return args, fields


def import_python_recipe(kind: str, text: str, *, path: str, function: str | None = None, cluster: str | None = None,
                         nodes: int | None = None, vocab: int | None = None, sets: dict | None = None,
                         source_dir: str | None = None) -> Imported:
    """Import a NeMo 2 (``kind`` 'nemo') or Megatron-Bridge ('bridge') Python recipe, read statically."""
    from strategies.recipe_table import framework_commit, recipe_library
    name = Path(path).name
    tree_ast = parse_recipe(text, name)
    fn = function or pick_function(kind, recipe_functions(tree_ast), name)
    args, fields = split_sets(sets)
    read: list = []
    value = evaluate_recipe(text, name, fn, library=recipe_library(), arguments=args,
                            source_dir=Path(source_dir) if source_dir else None, files_read=read)
    tree = plain(value)
    if not isinstance(tree, dict):
        raise ConfigError(f"{name}: {fn}() returns {str(getattr(tree, 'what', tree))[:80]}, not a configuration; "
                          f"give --recipe the function that returns the "
                          f"{'run.Partial' if kind == 'nemo' else 'ConfigContainer'}")
    apply_sets(tree, fields, name)
    strategy, notes = tree_to_strategy(tree, kind, f"{name} {fn}()", cluster=cluster, nodes=nodes, vocab=vocab,
                                       gpus=recipe_size(fn) if kind == "bridge" else None)
    strategy["model"]["name"] = fn
    strategy["_source"] = {"file": name, "recipe": fn, "framework": framework_commit(kind)}
    strategy["_inputs"] = read
    return Imported(strategy, tuple(notes), kind)


def import_bridge_yaml(data: Any, *, path: str = "run_config.yaml", cluster: str | None = None,
                       nodes: int | None = None, vocab: int | None = None, sets: dict | None = None) -> Imported:
    """Import Megatron-Bridge's saved ConfigContainer YAML (the run's resolved configuration)."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict) or not isinstance(data.get("train"), dict):
        raise ConfigError(f"{path}: expected Megatron-Bridge's saved ConfigContainer (a mapping with model: and "
                          f"train: sections, as Bridge writes run_config.yaml)")
    args, fields = split_sets(sets)
    if args:
        raise ConfigError(f"--set {next(iter(args))}: a saved configuration has no recipe arguments; give the "
                          f"dotted field, e.g. --set train.global_batch_size=N")
    tree = dict(data)
    apply_sets(tree, fields, path)
    strategy, notes = tree_to_strategy(tree, "bridge", path, cluster=cluster, nodes=nodes, vocab=vocab, gpus=None,
                                       saved=True)
    strategy["model"]["name"] = Path(path).stem
    strategy["_source"] = {"file": Path(path).name, "recipe": "saved ConfigContainer"}
    return Imported(strategy, tuple(notes), "bridge")
