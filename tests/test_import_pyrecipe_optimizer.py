"""Megatron-Bridge / NeMo 2 Python recipes' precision-aware optimizer (Megatron-core OptimizerConfig
``use_precision_aware_optimizer`` with ``main_grads_dtype`` / ``main_params_dtype`` / ``exp_avg_dtype`` /
``exp_avg_sq_dtype`` as torch dtypes, Bridge 067f987d perf_recipes/deepseek/common.py) read as data into
``options.optimizer_dtypes``."""
from pathlib import Path

import pytest

from strategies.errors import ConfigError
from strategies.importers import import_config

RECIPE = (Path(__file__).parent / "data" / "pyrecipes" / "bridge_qwen3_moe.py").read_text()


def _options(*lines):
    text = RECIPE.replace("    return cfg", "".join(f"    {line}\n" for line in lines) + "    return cfg")
    return import_config("bridge", text, origin="r.py", cluster="dgx-h100").strategy["options"]


def test_deepseek_perf_recipe_assignments_give_bf16_moments():
    # _enable_deepseek_precision_aware_optimizer, verbatim
    o = _options("cfg.optimizer.use_precision_aware_optimizer = True",
                 "cfg.optimizer.main_grads_dtype = torch.float32", "cfg.optimizer.main_params_dtype = torch.float32",
                 "cfg.optimizer.exp_avg_dtype = torch.bfloat16", "cfg.optimizer.exp_avg_sq_dtype = torch.bfloat16")
    assert o["optimizer_dtypes"] == {"exp_avg": "bf16", "exp_avg_sq": "bf16"}


def test_switch_alone_fp8_moment_and_bf16_main_grads():
    assert _options("cfg.optimizer.use_precision_aware_optimizer = True")["optimizer_dtypes"] == {}
    o = _options("cfg.optimizer.use_precision_aware_optimizer = True", "cfg.optimizer.exp_avg_dtype = torch.uint8",
                 "cfg.optimizer.main_params_dtype = torch.float16", "cfg.optimizer.main_grads_dtype = torch.bfloat16")
    assert o["optimizer_dtypes"] == {"exp_avg": "fp8", "main_params": "fp16", "main_grads": "bf16"}
    assert o["fp32_grad_accum"] is False


def test_absent_or_off_leaves_the_plain_optimizer():
    assert "optimizer_dtypes" not in _options()
    # nemotronh/common.py: the switch off with every dtype fp32
    assert "optimizer_dtypes" not in _options("cfg.optimizer.use_precision_aware_optimizer = False",
                                              "cfg.optimizer.exp_avg_dtype = torch.float32")


@pytest.mark.parametrize("lines, match", [
    (("cfg.optimizer.use_precision_aware_optimizer = True", "cfg.optimizer.exp_avg_dtype = torch.int32"),
     r"optimizer\.exp_avg_dtype = 'int32' is not one of torch\.float32"),
    (("cfg.optimizer.use_precision_aware_optimizer = True", "cfg.optimizer.main_params_dtype = torch.bfloat16"),
     r"optimizer\.main_params_dtype = 'bfloat16' is not one of torch\.float32, torch\.float, torch\.float16"),
    (("cfg.optimizer.exp_avg_sq_dtype = torch.bfloat16",),
     r"optimizer\.exp_avg_sq_dtype = bf16 needs the precision-aware optimizer.*use_precision_aware_optimizer = True"),
    (("cfg.optimizer.use_precision_aware_optimizer = 3",), r"optimizer\.use_precision_aware_optimizer = '3' must be"),
    (("cfg.optimizer.use_precision_aware_optimizer = True", "cfg.optimizer.main_grads_dtype = torch.bfloat16",
      "cfg.mixed_precision.grad_reduce_in_fp32 = True"), r"main_grads_dtype = bf16 with gradients reduced in fp32"),
])
def test_bad_values_one_line(lines, match):
    with pytest.raises(ConfigError, match=match) as e:
        _options(*lines)
    assert "\n" not in str(e.value)


def test_nemo2_optim_config_and_bridge_saved_yaml():
    from simulator.simulation.importing import check, finish
    data = Path(__file__).parent / "data" / "pyrecipes"
    imp = import_config("nemo", (data / "nemo_llama3_70b.py").read_text(), origin="n.py", cluster="dgx-h100", nodes=4,
                        vocab=128256, sets={"optim.config.use_precision_aware_optimizer": True,
                                            "optim.config.exp_avg_dtype": "torch.bfloat16",
                                            "optim.config.exp_avg_sq_dtype": "torch.bfloat16"})
    assert imp.strategy["options"]["optimizer_dtypes"] == {"exp_avg": "bf16", "exp_avg_sq": "bf16"}
    check(finish(imp))
    # Bridge's saved ConfigContainer writes a torch dtype as {_target_: torch.bfloat16, _call_: false}
    imp = import_config("bridge", (data / "bridge_run_config.yaml").read_text(), origin="r.yaml", cluster="dgx-h100",
                        nodes=2, sets={"optimizer.use_precision_aware_optimizer": True,
                                       "optimizer.exp_avg_dtype": {"_target_": "torch.bfloat16", "_call_": False}})
    assert imp.strategy["options"]["optimizer_dtypes"] == {"exp_avg": "bf16"}
