# Test fixture with the structure of pytorch/torchtitan torchtitan/models/llama3/config_registry.py at commit
# b5bcd76c66d0acb1a08b176d9639425bc55e0b2a (llama3_70b and llama3_405b; imports, loss, profiler, metrics,
# dataloader and validator kept in shape, values as in the file).
from torchtitan.components.checkpointer import CheckpointManager
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.optimizer import default_adamw, LRSchedulersContainer
from torchtitan.components.quantization import Float8LinearConverter
from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.trainer import Trainer

from . import model_registry


def llama3_70b() -> Trainer.Config:
    model_spec = model_registry("70B")
    return Trainer.Config(
        loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec))),
        hf_assets_path="./assets/hf/Llama-3.1-70B",
        model_spec=model_spec,
        optimizer=default_adamw(lr=1.5e-4),
        training=TrainingConfig(
            num_tokens_per_microbatch_per_dp_rank=8 * 8192,
            max_context_length=8192,
            steps=1000,
        ),
        parallelism=ParallelismConfig(
            tensor_parallel_degree=8,
        ),
        checkpoint=CheckpointManager.Config(interval=500),
        activation_checkpoint=FullAC.Config(),
    )


def llama3_405b() -> Trainer.Config:
    compile_config = CompileConfig(
        enable=True,
        enable_async_tensor_parallel=True,
    )
    model_spec = model_registry(
        "405B",
        converters=[
            Float8LinearConverter.Config(
                filter_fqns=["lm_head"],
                model_compile_enabled=(compile_config.enable and "model" in compile_config.components),
            ),
        ],
    )
    return Trainer.Config(
        hf_assets_path="./assets/hf/Llama-3.1-405B",
        model_spec=model_spec,
        optimizer=default_adamw(lr=8e-5),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=600),
        training=TrainingConfig(
            num_tokens_per_microbatch_per_dp_rank=2 * 8192,
            max_context_length=8192,
            steps=3000,
        ),
        parallelism=ParallelismConfig(
            tensor_parallel_degree=8,
        ),
        activation_checkpoint=FullAC.Config(),
        compile=compile_config,
    )


def llama3_8b_selective() -> Trainer.Config:
    config = llama3_70b()
    config.model_spec = model_registry("8B")
    config.parallelism.tensor_parallel_degree = 1
    config.activation_checkpoint = SelectiveAC.Config()
    return config
