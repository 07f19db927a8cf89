# Test fixture in the style of NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py
# and perf_recipes/llama/h100/llama3.py at commit 067f987df03b8355b03192d88d70f1709fedf51a: a recipe
# named with its size (_16gpu_), built on _pretrain_common() (recipes/common.py:37-133), the model from
# AutoBridge.from_hf_pretrained(...).get_model_config(), attribute assignments on cfg, an f-string, an
# if on a resolvable condition, _perf_precision("fp8_cs") (perf_recipes/_common.py:99-122).
import torch

from megatron.bridge import AutoBridge
from megatron.bridge.perf_recipes._common import _perf_precision
from megatron.bridge.recipes.common import _pretrain_common
from megatron.bridge.recipes.utils.tokenizer_utils import DEFAULT_NULL_TOKENIZER_VOCAB_SIZE
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.config import ConfigContainer

HF_ID = "Qwen/Qwen3-30B-A3B"
SEQ = 4 * 1024


def _moe_common(cfg: ConfigContainer, ep: int = 8) -> None:
    cfg.model.expert_model_parallel_size = ep
    cfg.model.moe_token_dispatcher_type = "alltoall"
    cfg.model.moe_grouped_gemm = True


def qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs_config(recompute: bool = True) -> ConfigContainer:
    cfg = _pretrain_common()
    cfg.model = AutoBridge.from_hf_pretrained(HF_ID).get_model_config()
    cfg.mixed_precision = _perf_precision("fp8_cs")
    cfg.tokenizer.tokenizer_type = "NullTokenizer"
    cfg.tokenizer.vocab_size = DEFAULT_NULL_TOKENIZER_VOCAB_SIZE
    cfg.dataset.seq_length = SEQ
    cfg.model.seq_length = SEQ
    cfg.model.tensor_model_parallel_size = 1
    cfg.model.pipeline_model_parallel_size = 2
    cfg.model.pipeline_dtype = torch.bfloat16
    cfg.model.virtual_pipeline_model_parallel_size = None
    cfg.model.context_parallel_size = 1
    cfg.model.sequence_parallel = False
    _moe_common(cfg, ep=8)
    cfg.train.global_batch_size = 256
    cfg.train.micro_batch_size = 2
    cfg.train.train_iters = 1000
    if recompute:
        cfg.model.recompute_granularity = "selective"
    cfg.checkpoint.save = f"/checkpoints/{HF_ID.split('/')[-1].lower()}_{SEQ}"
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)
    cfg.ddp.overlap_grad_reduce = True
    cfg.ddp.overlap_param_gather = True
    return cfg
