"""A Megatron-LM training log: the argument dump it starts with, and the measured time per iteration.

Formats, NVIDIA/Megatron-LM at commit d98e8a64ddf34856e74b24714e3bedb2f5a39553:

* ``megatron/training/arguments.py`` ``_print_args("arguments", args)``: a banner
  ``------------------------ arguments ------------------------``, one line per argument
  ``'  {} {} {}'.format(arg, '.' * (48 - len(arg)), value)`` (the argparse *dest* name, Python's ``str``
  of the value), sorted, then ``-------------------- end of arguments ---------------------``.
* ``megatron/training/training.py`` ``training_log``: each logged iteration prints
  ``' elapsed time per iteration (ms): {:.1f} |'`` averaged over the ``--log-interval`` iterations.

The dump is turned back into the ``pretrain_gpt.py`` flags it came from (``dest`` -> ``--flag``), for
the flags :mod:`strategies.import_megatron` reads; Megatron's derived values (``ffn_hidden_size``,
``kv_channels``, ``world_size``) are in it too.
"""
from __future__ import annotations

import re
import statistics

from strategies.errors import ConfigError

BEGIN = re.compile(r"^-{8,} arguments -{8,}\s*$", re.MULTILINE)
END = re.compile(r"^-{8,} end of arguments -{8,}\s*$", re.MULTILINE)
_LINE = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?([A-Za-z_][A-Za-z0-9_]*) \.+ (.*?)\s*$")
_ELAPSED = re.compile(r"elapsed time per iteration \(ms\): ([0-9]+(?:\.[0-9]*)?)")
MAX_ARGUMENTS = 5_000
"""Lines of an argument dump (Megatron-LM prints about 600)."""

#: argparse dest -> flag where they differ (arguments.py: dest= / action='store_false')
DEST_FLAGS = {"fp8": "fp8-format", "fp4": "fp4-format", "add_position_embedding": "no-position-embedding"}
#: flags whose default value the dump always prints, read only when the flag they belong to is on
DEPENDS = {"optimizer-offload-fraction": "optimizer-cpu-offload", "overlap-cpu-optimizer-d2h-h2d": "optimizer-cpu-offload",
           "moe-layer-freq": "num-experts", "window-attn-skip-freq": "window-size",
           **{f: "multi-latent-attention" for f in ("q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim",
                                                     "v-head-dim")},
           **{f: "num-experts" for f in ("moe-flex-dispatcher-backend", "moe-flex-dispatcher-num-sms",
                                         "moe-deepep-num-sms", "moe-router-topk", "moe-token-dispatcher-type")}}
#: store_false flags: the dest printed False means the flag was given
STORE_FALSE = {"add_bias_linear": "disable-bias-linear", "add_position_embedding": "no-position-embedding"}


def is_megatron_log(text: str) -> bool:
    return bool(BEGIN.search(text))


def read_megatron_log(text: str, read: set) -> tuple[list, int | None, list]:
    """``(flags, world_size, iteration_ms)`` from a log: the ``pretrain_gpt.py`` words for the dests whose
    flag is in ``read``, the ``world_size`` the run used, and every logged ``elapsed time per iteration``."""
    b = BEGIN.search(text)
    e = END.search(text, b.end())
    if not e:
        raise ConfigError("megatron log: the argument dump has no '---- end of arguments ----' line; give the "
                          "log from its start through the dump")
    lines = text[b.end():e.start()].strip("\n").splitlines()
    if len(lines) > MAX_ARGUMENTS:
        raise ConfigError(f"megatron log: the argument dump has {len(lines):,} lines, over {MAX_ARGUMENTS:,}")
    values: dict = {}
    for n, raw in enumerate(lines, start=text.count("\n", 0, b.end()) + 1):
        m = _LINE.match(raw)
        if not m:
            if raw.strip():
                raise ConfigError(f"megatron log line {n}: {raw.strip()[:60]!r} is not 'name ..... value' inside "
                                  f"the argument dump")
            continue
        values[m.group(1)] = m.group(2)
    words: list = []
    on = {DEST_FLAGS.get(d, d.replace("_", "-")) for d, v in values.items() if v not in ("None", "False", "[]", "0")}
    for dest, value in values.items():
        if dest in STORE_FALSE:
            if value == "False" and STORE_FALSE[dest] in read:
                words.append("--" + STORE_FALSE[dest])
            continue
        flag = DEST_FLAGS.get(dest, dest.replace("_", "-"))
        if flag not in read or value in ("None", "False", "[]") or DEPENDS.get(flag, flag) not in on:
            continue
        if value == "True":
            words.append("--" + flag)
            continue
        value = re.sub(r"^[A-Za-z]+\.", "", value)          # AttnBackend.auto -> auto (enum str)
        items = re.fullmatch(r"\[(?:'([^']*)'(?:, )?)+\]", value)
        if items and flag != "moe-layer-freq":              # ['p2p'] (a per-layer list of one kind)
            kinds = set(re.findall(r"'([^']*)'", value))
            value = kinds.pop() if len(kinds) == 1 else value
        words += ["--" + flag, value]
    if values.get("bf16") == "True" and "--accumulate-allreduce-grads-in-fp32" in words:
        words.remove("--accumulate-allreduce-grads-in-fp32")   # arguments.py forces it with bf16
    ws = values.get("world_size")
    world = int(ws) if ws and ws.isdigit() else None
    times = [float(t) for t in _ELAPSED.findall(text, e.end())]
    return words, world, times


def measured_iteration_ms(times: list) -> float | None:
    """The median of the logged iteration times, the first excluded (it includes warm-up and compilation)."""
    rest = times[1:]
    return statistics.median(rest) if rest else None
