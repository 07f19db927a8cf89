"""``options.optimizer_dtypes``: Megatron-core's precision-aware optimizer (``--use-precision-aware-optimizer``
with ``--main-grads-dtype`` / ``--main-params-dtype`` / ``--exp-avg-dtype`` / ``--exp-avg-sq-dtype``).

Giving the mapping turns the optimizer on (``{}``: the switch alone, every dtype Megatron's default fp32);
its keys are the four dtypes, with the choices Megatron-LM's arguments.py accepts (NVIDIA/Megatron-LM
d98e8a6, the precision-aware optimizer's arguments: main grads fp32/bf16, main params fp32/fp16, moments
fp32/fp16/bf16/fp8). What each dtype changes in bytes held and moved is priced in taskgraph/memory.py
(``optimizer_state_bytes``) and taskgraph/overheads.py (``fused_adam_bytes``; Transformer Engine's ``FusedAdam``).
"""
from __future__ import annotations

from dataclasses import dataclass

from strategies.config import check_keys, get_str
from strategies.errors import ConfigError, brief

#: Megatron-LM arguments.py (d98e8a6) ``choices`` of each dtype flag
OPTIMIZER_DTYPE_CHOICES = {"main_grads": ("fp32", "bf16"), "main_params": ("fp32", "fp16"),
                           "exp_avg": ("fp32", "fp16", "bf16", "fp8"), "exp_avg_sq": ("fp32", "fp16", "bf16", "fp8")}


@dataclass(frozen=True)
class OptimizerDtypes:
    """The precision-aware optimizer's dtypes (Megatron-core optimizer_config.py, fields of the same names).

    main_grads: the gradient buffer the optimizer reads; bf16 is Megatron's bf16 gradient accumulation and
        reduction (``options.fp32_grad_accum: false``, which must be written with it).
    main_params: the master weights (fp32: Transformer Engine keeps bf16 parameters' masters as int16
        remainders, ``store_param_remainders``; fp16: scaled fp16 masters).
    exp_avg, exp_avg_sq: Adam's first and second moments as stored between steps.
    """

    main_grads: str = "fp32"
    main_params: str = "fp32"
    exp_avg: str = "fp32"
    exp_avg_sq: str = "fp32"


def parse_optimizer_dtypes(o: dict) -> OptimizerDtypes | None:
    """``options.optimizer_dtypes`` of the options mapping ``o`` (None: not given, the plain optimizer)."""
    d = o.get("optimizer_dtypes")
    if d is None:
        return None
    where = "options.optimizer_dtypes"
    if not isinstance(d, dict):
        raise ConfigError(f"{where} = {brief(d)} must be a mapping of main_grads / main_params / exp_avg / "
                          f"exp_avg_sq to a dtype ({{}} for Megatron's defaults, all fp32)")
    check_keys(d, tuple(OPTIMIZER_DTYPE_CHOICES), where)
    return OptimizerDtypes(**{k: get_str(d, k, where, default="fp32", choices=c)
                              for k, c in OPTIMIZER_DTYPE_CHOICES.items()})


def check_optimizer_dtypes(o: dict, par, tr, opt) -> None:
    """What Megatron-core refuses with the precision-aware optimizer, and where it does not exist."""
    dt = opt.optimizer_dtypes
    if dt is None:
        return
    where = "options.optimizer_dtypes"
    if opt.stack not in (None, "megatron-te"):
        raise ConfigError(f"{where} is Megatron-core's precision-aware optimizer (Transformer Engine FusedAdam), "
                          f"but options.stack = {brief(opt.stack)}; set stack: megatron-te or drop optimizer_dtypes")
    if tr.master_weights is False:
        raise ConfigError(f"{where} sets the dtypes of the master weights, but training.master_weights = false; "
                          f"drop one of them")
    if par.zero < 1:
        # megatron/core/optimizer/__init__.py: "--use-precision-aware-optimizer only supported with
        # distributed optimizer"
        raise ConfigError(f"{where}: Megatron-core supports the precision-aware optimizer only with the distributed "
                          f"optimizer, but parallel.zero = {par.zero}; set zero: 1 or more, or drop optimizer_dtypes")
    # arguments.py validate_args: "--main-grads-dtype can only be fp32 when
    # --accumulate-allreduce-grads-in-fp32 is set"; bf16 main grads accumulate and reduce in bf16
    if dt.main_grads == "bf16" and opt.fp32_grad_accum:
        raise ConfigError(f"{where}.main_grads = 'bf16' with options.fp32_grad_accum = true: bf16 main gradients "
                          f"are Megatron's bf16 gradient buffer; set fp32_grad_accum: false or main_grads: fp32")


#: torch dtype names (a Python recipe's ``torch.bfloat16``, read as data) -> the flag's name; Megatron-LM
#: arguments.py (d98e8a6) maps fp32/bf16/fp16/fp8 to torch.float32/bfloat16/float16/uint8
TORCH_DTYPE_NAMES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
                     "uint8": "fp8"}


def imported_optimizer_dtypes(switch: bool, given: dict, name_of, options: dict, switch_name: str) -> None:
    """``options.optimizer_dtypes`` (and ``fp32_grad_accum: false`` with bf16 main grads) of an importer:
    ``switch`` is ``use_precision_aware_optimizer``, ``given`` the dtypes read (keys of
    :data:`OPTIMIZER_DTYPE_CHOICES`, values checked there), ``name_of(key)`` how the source spells the field
    in an error, ``switch_name`` the switch's. Megatron-core optimizer_config.py (d98e8a6) asserts "... can only be fp32 when not using
    precision-aware optimizer"; arguments.py that bf16 main grads go without fp32 gradient reduction."""
    if not switch:
        low = [k for k, v in given.items() if v != "fp32"]
        if low:
            raise ConfigError(f"{name_of(low[0])} = {given[low[0]]} needs the precision-aware optimizer "
                              f"(Megatron asserts it is fp32 otherwise); set {switch_name} or make it fp32")
        return
    options["optimizer_dtypes"] = {k: v for k, v in given.items() if v != "fp32"}
    if given.get("main_grads") == "bf16":
        if options.get("fp32_grad_accum") is True:
            raise ConfigError(f"{name_of('main_grads')} = bf16 with gradients reduced in fp32 (Megatron asserts "
                              f"that main grads can only be fp32 then); drop one of them")
        options["fp32_grad_accum"] = False
