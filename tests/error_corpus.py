"""The error corpus as data: bad (and a few borderline valid) command lines with their files.

Each :class:`Case` runs ``execsim ARGV`` in-process in a fresh folder holding ``BASE_FILES`` plus the
case's ``files`` (``tests/test_error_corpus.py`` checks it). Add a case by adding a line: give the
command line, the files that differ from the base, the regex the one ``execsim: error:`` line must
match and the text naming the field (or flag, or file) at fault.

Base files: ``s.yaml`` a tiny strategy (2 layers, tp 2, pp 2, 8 H100s, 4 microbatches), ``p.yaml`` a
pipeline description, ``m.yaml`` a model file, ``c.yaml`` a cluster file, ``hf.json`` a Hugging Face
config, ``ok.csv`` a custom 1F1B schedule for ``p.yaml``, ``prof.csv`` a profile matching ``s.yaml``,
and ``adir/`` a folder.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import yaml


@dataclass(frozen=True)
class Case:
    """One corpus entry.

    id: test id. argv: the command line (a list, or a string split on spaces). files: name ->
    text/bytes added to the base files (``None`` deletes a base file). expect: regex the error line
    must match. field: text the error line must contain. code: expected exit status (0 = a valid
    control, which must print no error). creates: files the run may create. bound: most tasks the
    run may build (the work bound: an error must come before the work). readonly: files made
    read-only before the run.
    """

    id: str
    argv: object
    files: dict = field(default_factory=dict)
    expect: str = ""
    field: str = ""
    code: int = 2
    creates: tuple = ()
    bound: int = 2000
    readonly: tuple = ()


# --------------------------------------------------------------------------- base files
SECTIONS = {
    "model": "{name: tiny, layers: 2, hidden: 64, heads: 4, vocab: 128}",
    "cluster": "{preset: dgx-h100, nodes: 1}",
    "parallel": "{tp: 2, pp: 2}",
    "training": "{micro_batch: 1, global_batch: 8, seq_len: 128}",
}


def strat(**sections) -> str:
    """A strategy file: the tiny base with sections replaced (raw YAML text each; None drops one)."""
    d = {**SECTIONS, **sections}
    return "".join(f"{k}: {v}\n" for k, v in d.items() if v is not None)


PIPE = {"schedule": "1f1b", "pp": 2, "microbatches": 4, "forward_ms": 1.0, "backward_ms": 2.0, "p2p_ms": 0.1}


def pipe(**kw) -> str:
    """A pipeline file: the base with keys replaced (Python values, dumped as YAML; None drops)."""
    d = {k: v for k, v in {**PIPE, **kw}.items() if v is not None}
    return yaml.safe_dump({"pipeline": d}, sort_keys=False)


HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 128,
      "max_position_embeddings": 256, "tie_word_embeddings": False}


def hf(**kw) -> str:
    d = {k: v for k, v in {**HF, **kw}.items() if v is not None}
    return json.dumps(d)


CLUSTER = "gpu: H100-SXM-80GB\nnodes: 1\ngpus_per_node: 8\nnvlink_latency_us: 1\nnvlink_efficiency: 0.8\n" \
          "nic_gbit: 400\nnic_latency_us: 5\nnic_efficiency: 0.8\n"
PROFILE_HEADER = "gpu,dtype,op,pass,shape,time_us\n"
PROFILE_ROW = "H100-SXM-80GB,bf16,attn_out,fwd,128x64x32x1,12.5\n"

BASE_FILES = {
    "s.yaml": strat(),
    "p.yaml": pipe(),
    "m.yaml": "layers: 2\nhidden: 64\nheads: 4\nvocab: 128\n",
    "c.yaml": CLUSTER,
    "hf.json": hf(),
    "ok.csv": "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n",
    "prof.csv": PROFILE_HEADER + PROFILE_ROW,
    "adir/keep.txt": "a folder\n",
}

SIM = "simulate s.yaml"
PSIM = "simulate p.yaml"

# An alias "bomb": 9 levels of 9 references = 9^9 leaves when printed, a few hundred bytes on disk.
BOMB = "".join(f"  b{i}: &b{i} [" + ", ".join([f"*b{i - 1}"] * 9) + "]\n" for i in range(1, 10))
BOMB = "bomb:\n  b0: &b0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + BOMB


def bomb_in(section: str, key: str) -> str:
    """A strategy whose ``section.key`` holds the alias bomb (anchors in a top-level helper key)."""
    text = strat(**{section: None})
    return BOMB + text + f"{section}:\n  {key}: *b9\n"


CASES: list[Case] = []


def _yaml_nesting_limited() -> bool:
    """True when this PyYAML (its C parser, as strategies/documents.py uses) stops deep nesting itself."""
    try:
        yaml.load("[" * 5000 + "]" * 5000, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return True
    return False


# The deep-nesting case: either PyYAML refuses it (one "not valid YAML" line naming the file) or it
# parses and the loader rejects the nested list as a model name.
_DEEP_NESTING_EXPECT = ((r"not valid YAML: .*nesting depth", "s.yaml") if _yaml_nesting_limited()
                        else (r"model = .* must be a preset name", "model"))


def add(*cases: Case) -> None:
    CASES.extend(cases)


# --------------------------------------------------------------------------- duplicate keys
for sec, dup in [("parallel", "{tp: 2, pp: 2, tp: 4}"), ("training", ("{micro_batch: 1, global_batch: 8, "
                 "seq_len: 128, global_batch: 16}")), ("model", ("{name: a, layers: 2, hidden: 64, heads: 4, "
                 "vocab: 128, layers: 4}")), ("cluster", "{preset: dgx-h100, nodes: 1, nodes: 2}")]:
    key = dup.split(", ")[-1].split(":")[0]
    add(Case(f"dup-{sec}-{key}", SIM, {"s.yaml": strat(**{sec: dup})}, r"given twice", f"{sec}.{key}"))
add(
    Case("dup-top-level", SIM, {"s.yaml": strat() + "parallel: {tp: 1}\n"}, r"key 'parallel' is given twice \(line 3",
         "parallel"),
    Case("dup-options", SIM, {"s.yaml": strat() + "options:\n  fidelity: coarse\n  fidelity: operator\n"},
         r"given twice", "options.fidelity"),
    Case("dup-schedule-map", SIM, {"s.yaml": strat() + "schedule:\n  name: 1f1b\n  name: gpipe\n"}, r"given twice",
         "schedule.name"),
    Case("dup-pipeline", PSIM, {"p.yaml": "pipeline:\n  pp: 2\n  pp: 4\n  microbatches: 4\n  forward_ms: 1\n"
                                          "  backward_ms: 2\n"}, r"given twice", "pipeline.pp"),
    Case("dup-pipeline-top", PSIM, {"p.yaml": pipe() + "pipeline: {pp: 3}\n"}, r"given twice", "pipeline"),
    Case("dup-model-file", SIM, {"s.yaml": strat(model="m.yaml"), "m.yaml": "layers: 2\nhidden: 64\nheads: 4\n"
                                 "vocab: 128\nheads: 8\n"}, r"model file .*given twice", "heads"),
    Case("dup-cluster-file", SIM, {"s.yaml": strat(cluster="c.yaml"), "c.yaml": CLUSTER + "nodes: 4\n"},
         r"cluster file .*given twice", "nodes"),
    Case("dup-hf-json", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf()[:-1] + ', "num_hidden_layers": 4}'},
         r"given twice in one object", "num_hidden_layers"),
    Case("dup-json-strategy", "simulate s.json", {"s.json": '{"model": "llama3-8b", "model": "gpt3-175b"}'},
         r"given twice", "model"),
    Case("dup-nested-list", SIM, {"s.yaml": strat(model="{name: a, layers: 2, hidden: 64, heads: 4, vocab: 128, "
                                  "moe_layers: [{a: 1, a: 2}]}")}, r"given twice", "model.moe_layers[0].a"),
    Case("dup-int-float-key", SIM, {"s.yaml": strat() + "options: {1: a, 1.0: b}\n"}, r"given twice", "options.1"),
    Case("dup-set-value", [*SIM.split(), "--set", "parallel={tp: 1, tp: 2}"], {}, r"given twice", "tp"),
    Case("dup-compare-second-file", "compare s.yaml t.yaml", {"t.yaml": strat() + "training: {seq_len: 64}\n"},
         r"given twice", "training"),
    Case("dup-memory-cmd", "memory s.yaml", {"s.yaml": strat(parallel="{tp: 2, tp: 2, pp: 2}")}, r"given twice",
         "parallel.tp"),
    Case("dup-plan-recompute", "plan-recompute s.yaml", {"s.yaml": strat(training="{micro_batch: 1, micro_batch: 2, "
         "global_batch: 8, seq_len: 128}")}, r"given twice", "training.micro_batch"),
)

# --------------------------------------------------------------------------- encodings and file kinds
for name, data in [("latin1", "model: caf\xe9\n".encode("latin-1")), ("utf16", strat().encode("utf-16")),
                   ("binary", bytes(range(256))), ("nul", b"model: a\x00b\n"), ("cp1252", b"# \x93quoted\x94\n")]:
    add(Case(f"encoding-strategy-{name}", SIM, {"s.yaml": data}, r"not UTF-8 text|NUL byte", "s.yaml"))
    add(Case(f"encoding-pipeline-{name}", PSIM, {"p.yaml": data}, r"not UTF-8 text|NUL byte", "p.yaml"))
add(
    Case("encoding-model-file", SIM, {"s.yaml": strat(model="m.yaml"), "m.yaml": b"layers: 2\nname: \xff\n"},
         r"model file .*not UTF-8 .*byte 0xff", "m.yaml"),
    Case("encoding-cluster-file", SIM, {"s.yaml": strat(cluster="c.yaml"), "c.yaml": b"\xfe\xfe"},
         r"cluster file .*not UTF-8", "c.yaml"),
    Case("encoding-hf-json", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": b'{"a": "\xe9"}'},
         r"not UTF-8", "hf.json"),
    Case("encoding-schedule-csv", PSIM, {"p.yaml": pipe(schedule="custom", schedule_csv="ok.csv"),
                                         "ok.csv": b"0F0,\xff\n"}, r"not UTF-8", "ok.csv"),
    Case("encoding-profile-csv", SIM, {"s.yaml": strat() + "options: {profile: prof.csv}\n",
                                       "prof.csv": b"gpu,dtype\n\xe9\n"}, r"not UTF-8", "prof.csv"),
    Case("file-empty", SIM, {"s.yaml": ""}, r"must contain a mapping at the top level, got NoneType", "s.yaml"),
    Case("file-only-comment", SIM, {"s.yaml": "# nothing\n"}, r"mapping at the top level", "s.yaml"),
    Case("file-scalar", SIM, {"s.yaml": "42\n"}, r"mapping at the top level, got int", "s.yaml"),
    Case("file-list", SIM, {"s.yaml": "- a\n- b\n"}, r"mapping at the top level, got list", "s.yaml"),
    Case("file-missing", "simulate nope.yaml", {}, r"does not exist", "nope.yaml"),
    Case("file-is-dir", "simulate adir", {}, r"is a directory", "adir"),
    Case("file-yaml-syntax", SIM, {"s.yaml": "model: [a\n"}, r"not valid YAML", "s.yaml"),
    Case("file-yaml-tab", SIM, {"s.yaml": "model:\n\t- a\n"}, r"not valid YAML", "s.yaml"),
    Case("file-json-syntax", "simulate s.json", {"s.json": '{"model": }'}, r"not valid JSON", "s.json"),
    Case("file-json-trailing", "simulate s.json", {"s.json": '{"model": "a"} x'}, r"not valid JSON", "s.json"),
    Case("file-yaml-python-tag", SIM, {"s.yaml": "model: !!python/object/apply:os.system [ls]\n"},
         r"not valid YAML", "s.yaml"),
    Case("file-yaml-two-docs", SIM, {"s.yaml": strat() + "---\na: 1\n"}, r"not valid YAML", "s.yaml"),
    Case("file-yaml-huge-int", SIM, {"s.yaml": strat(parallel="{tp: " + "9" * 5000 + "}")},
         r"cannot be read|must be|over the limit", "s.yaml"),
    Case("file-yaml-unhashable-key", SIM, {"s.yaml": strat() + "? [a, b]\n: 1\n"}, r"not valid YAML|unknown key",
         "s.yaml"),
    Case("file-yaml-deep-nesting", SIM, {"s.yaml": strat(model="[" * 5000 + "]" * 5000)},
         *_DEEP_NESTING_EXPECT),
    Case("file-too-large", SIM, {"s.yaml": "# " + "x" * (9 * 2 ** 20) + "\n"}, r"over the limit of 8,388,608",
         "s.yaml"),
)

# --------------------------------------------------------------------------- non-finite and negative numbers
for key in ("train_tokens",):
    for v in (".inf", "-.inf", ".nan"):
        add(Case(f"nonfinite-training-{key}-{v}", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, "
             f"seq_len: 128, {key}: {v}}}")}, r"must be a finite number", f"training.{key}"))
for key in ("grad_bucket_mb", "memory_reserve_gb", "p2p_host_gap_us"):
    for v in (".inf", "-.inf", ".nan"):
        add(Case(f"nonfinite-options-{key}-{v}", SIM, {"s.yaml": strat() + f"options: {{{key}: {v}}}\n"},
                 r"must be a finite number", f"options.{key}"))
    add(Case(f"negative-options-{key}", SIM, {"s.yaml": strat() + f"options: {{{key}: -1}}\n"}, r"must be (>|>=) 0",
             f"options.{key}"))
for key in ("forward_ms", "backward_ms", "backward_input_ms", "backward_weight_ms", "p2p_ms", "activation_mb"):
    for v in (float("inf"), float("-inf"), float("nan")):
        add(Case(f"nonfinite-pipeline-{key}-{v}", PSIM, {"p.yaml": pipe(**{key: v})}, r"must be a finite number",
                 f"pipeline.{key}"))
    add(Case(f"negative-pipeline-{key}", PSIM, {"p.yaml": pipe(**{key: -1.0})}, r"must be >= 0", f"pipeline.{key}"))
    add(Case(f"huge-pipeline-{key}", PSIM, {"p.yaml": pipe(**{key: 1e300})}, r"must be <= (1e\+09|1000000000)",
             f"pipeline.{key}"))
    add(Case(f"string-pipeline-{key}", PSIM, {"p.yaml": pipe(**{key: "fast"})}, r"must be a number",
             f"pipeline.{key}"))
add(
    Case("nonfinite-pipeline-list-item", PSIM, {"p.yaml": pipe(forward_ms=[1.0, float("nan")])},
         r"pipeline\.forward_ms\[1\] = nan must be a finite number", "forward_ms[1]"),
    Case("negative-pipeline-list-item", PSIM, {"p.yaml": pipe(backward_ms=[2.0, -2.0])},
         r"backward_ms\[1\] = -2.0 must be >= 0", "backward_ms[1]"),
    Case("nonfinite-unknown-key-anywhere", SIM, {"s.yaml": strat() + "x_comment: .nan\n"},
         r"x_comment = nan must be a finite number", "x_comment"),
    Case("nonfinite-json-nan", "simulate s.json", {"s.json": '{"model": NaN}'}, r"NaN is not a JSON number", "NaN"),
    Case("nonfinite-json-infinity", "simulate s.json", {"s.json": '{"pipeline": {"pp": Infinity}}'},
         r"Infinity is not a JSON number", "Infinity"),
    Case("nonfinite-json-neg-infinity", "simulate s.json", {"s.json": '{"pipeline": {"pp": -Infinity}}'},
         r"-Infinity is not a JSON number", "Infinity"),
    Case("nonfinite-json-overflow", "simulate s.json", {"s.json": '{"pipeline": {"forward_ms": 1e999}}'},
         r"must be a finite number", "pipeline.forward_ms"),
    Case("nonfinite-hf-nan", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf()[:-1] + ', "rope_theta": NaN}'},
         r"NaN is not a JSON number", "hf.json"),
    Case("nonfinite-hf-dropout", SIM, {"s.yaml": strat(model="hf.json"),
                                       "hf.json": hf()[:-1] + ', "attention_dropout": 1e999}'},
         r"must be a finite number", "attention_dropout"),
    Case("nonfinite-cluster-file", SIM, {"s.yaml": strat(cluster="c.yaml"), "c.yaml": CLUSTER.replace(
         "nic_gbit: 400", "nic_gbit: .inf")}, r"nic_gbit = inf must be a finite number", "nic_gbit"),
    Case("nonfinite-cluster-inline", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, "
                                           "nvlink_efficiency: .nan}")}, r"finite", "nvlink_efficiency"),
    Case("negative-cluster-latency", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, "
                                           "nic_latency_us: -5}")}, r"out of range", "nic_latency_us"),
    Case("nonfinite-model-inline", SIM, {"s.yaml": strat(model="{name: a, layers: 2, hidden: .inf, heads: 4, "
                                         "vocab: 128}")}, r"must be a finite number", "model.hidden"),
    Case("nonfinite-model-file", SIM, {"s.yaml": strat(model="m.yaml"), "m.yaml": "layers: .nan\nhidden: 64\n"
                                       "heads: 4\nvocab: 128\n"}, r"finite number", "layers"),
    Case("nonfinite-gpu-override", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, gpu: {base: "
                                         "H100-SXM-80GB, hbm_gbps: .inf}}")}, r"finite", "hbm_gbps"),
)
for flagval, fieldname in [("training.train_tokens=.inf", "train_tokens"), ("training.train_tokens=.nan",
                           "train_tokens"), ("options.memory_reserve_gb=-.inf", "memory_reserve_gb"),
                           ("options.grad_bucket_mb=.NaN", "grad_bucket_mb"), ("parallel.tp=.inf", "tp"),
                           ("training.seq_len=-.inf", "seq_len")]:
    add(Case(f"nonfinite-set-{flagval}", [*SIM.split(), "--set", flagval], {}, r"finite number",
             fieldname))
add(
    Case("negative-set-tp", [*SIM.split(), "--set", "parallel.tp=-2"], {}, r"parallel\.tp = -2 must be >= 1",
         "parallel.tp"),
    Case("negative-set-pipeline", [*PSIM.split(), "--set", "pipeline.p2p_ms=-0.1"], {}, r"must be >= 0",
         "pipeline.p2p_ms"),
    Case("nonfinite-set-pipeline", [*PSIM.split(), "--set", "pipeline.forward_ms=.inf"], {}, r"finite",
         "forward_ms"),
)
for factor in ("inf", "-inf", "nan", "-1", "1e400", "x", "", "1e7", "infinity"):
    add(Case(f"whatif-factor-{factor or 'empty'}", [*PSIM.split(), "--mode", "delta", "--what-if", f"F={factor}"],
             {}, r"--what-if .* must look like PATTERN=FACTOR with a finite FACTOR", "--what-if"))
add(
    Case("whatif-no-equals", [*PSIM.split(), "--mode", "delta", "--what-if", "F"], {}, r"PATTERN=FACTOR",
         "--what-if"),
    Case("whatif-no-pattern", [*PSIM.split(), "--mode", "delta", "--what-if", "=2"], {}, r"PATTERN=FACTOR",
         "--what-if"),
    Case("whatif-without-delta", [*PSIM.split(), "--what-if", "F=2"], {}, r"--what-if needs --mode delta",
         "--what-if"),
    Case("whatif-no-match", [*PSIM.split(), "--mode", "delta", "--what-if", "nosuchop=2"], {},
         r"no task matches 'nosuchop'", "--what-if"),
    Case("whatif-no-match-no-trace", [*PSIM.split(), "--mode", "delta", "--what-if", "zzz*=2", "--trace", "t.json"],
         {}, r"no task matches", "--what-if"),
    Case("whatif-huge-text", [*PSIM.split(), "--mode", "delta", "--what-if", "x" * 100000 + "=inf"], {},
         r"must look like", "--what-if"),
)

# --------------------------------------------------------------------------- integers must be integers
INT_FIELDS = {"parallel": ("tp", "pp", "dp", "vpp", "cp", "ep", "zero"),
              "training": ("micro_batch", "global_batch", "seq_len")}
for sec, keys in INT_FIELDS.items():
    for key in keys:
        for v, tag in (("2.0", "float"), ("2.0e+30", "huge-float"), ("2.5", "fraction"), ('"2"', "string")):
            base = "{tp: 2, pp: 2" if sec == "parallel" else "{micro_batch: 1, global_batch: 8, seq_len: 128"
            text = base + (f", {key}: {v}}}" if key not in ("tp", "pp", "micro_batch", "global_batch", "seq_len")
                           else "}")
            if key in ("tp", "pp", "micro_batch", "global_batch", "seq_len"):
                text = text.replace(f"{key}: {2 if key in ('tp', 'pp') else {'micro_batch': 1, 'global_batch': 8, 'seq_len': 128}[key]}",
                                    f"{key}: {v}")
            add(Case(f"int-{sec}-{key}-{tag}", SIM, {"s.yaml": strat(**{sec: text})}, r"must be an integer",
                     f"{sec}.{key}"))
for key, v in (("pp", 2.0), ("vpp", 1.0), ("microbatches", 4.0), ("microbatches", 1e30), ("pp", "two"),
               ("microbatches", True)):
    add(Case(f"int-pipeline-{key}-{v}", PSIM, {"p.yaml": pipe(**{key: v})}, r"must be an integer",
             f"pipeline.{key}"))
MODEL = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 128}
for key in ("layers", "hidden", "heads", "vocab", "kv_heads", "ffn", "max_seq"):
    add(Case(f"int-model-{key}-float", SIM, {"s.yaml": strat(model="m.yaml"),
                                             "m.yaml": yaml.safe_dump({**MODEL, key: 64.0})},
             rf"model\.{key} = 64\.0 must be an integer", f"model.{key}"))
for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "intermediate_size"):
    add(Case(f"int-hf-{key}-float", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(**{key: 64.5})},
             r"must be an integer", key))
    add(Case(f"int-hf-{key}-string", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(**{key: "64"})},
             r"must be an integer", key))
for key in ("nodes", "gpus_per_node"):
    add(Case(f"int-cluster-{key}-float", SIM, {"s.yaml": strat(cluster="c.yaml"), "c.yaml": CLUSTER.replace(
             f"{key}: ", f"{key}: 1.5 #")}, r"must be an integer", key))
add(
    Case("int-bool-tp", SIM, {"s.yaml": strat(parallel="{tp: true, pp: 2}")}, r"must be an integer", "parallel.tp"),
    Case("int-list-pp", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: [2]}")}, r"must be an integer", "parallel.pp"),
    Case("int-null-seq", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, seq_len: null}")},
         r"must be an integer", "training.seq_len"),
    Case("int-over-2-53", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 9007199254740993, "
                                "seq_len: 128}")}, r"over the limit of 9,007,199,254,740,992", "global_batch"),
    Case("bool-string-false", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, sp: 'false'}")},
         r"must be true or false \(without quotes\)", "parallel.sp"),
    Case("bool-int", SIM, {"s.yaml": strat() + "options: {flash_attention: 1}\n"}, r"must be true or false",
         "options.flash_attention"),
    Case("hf-tie-string", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(tie_word_embeddings="false")},
         r"tie_word_embeddings = 'false' must be true or false \(without quotes\)", "tie_word_embeddings"),
    Case("hf-attention-bias-string", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(attention_bias="true")},
         r"must be true or false", "attention_bias"),
    Case("hf-mlp-bias-int", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(mlp_bias=0)},
         r"must be true or false", "mlp_bias"),
    Case("hf-architectures-dict", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(architectures={"a": 1})},
         r"architectures = .* must be a list of class names", "architectures"),
    Case("hf-architectures-unknown-string", SIM, {"s.yaml": strat(model="hf.json"),
                                                  "hf.json": hf(architectures="GPT2LMHeadModel", model_type="gpt2")},
         r"'GPT2LMHeadModel' is not supported", "architectures"),
    Case("hf-architectures-list-of-lists", SIM, {"s.yaml": strat(model="hf.json"),
                                                 "hf.json": hf(architectures=[["x"]])}, r"must be a list of class",
         "architectures"),
    Case("hf-top-level-list", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": "[1, 2]"},
         r"mapping at the top level, got list", "hf.json"),
    Case("hf-layers-huge", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(num_hidden_layers=1000000)},
         r"model\.layers = 1000000 is over the limit of 10,000", "model.layers"),
    Case("hf-hidden-huge", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(hidden_size=2 ** 40)},
         r"over the limit", "hidden"),
)

# --------------------------------------------------------------------------- size limits (refused before work)
add(
    Case("limit-schedule-microbatches", "schedule --schedule 1f1b --pp 4 --microbatches 10000000", {},
         r"pp\*vpp\*microbatches = 4\*1\*10000000 = 40000000 .* exceeds the limit", "microbatches"),
    Case("limit-schedule-vpp", "schedule --schedule interleaved-1f1b --pp 4 --microbatches 8 --vpp 1000000", {},
         r"exceeds the limit", "vpp"),
    Case("limit-schedule-pp", "schedule --schedule gpipe --pp 100000000 --microbatches 1", {}, r"exceeds the limit",
         "pp"),
    Case("limit-schedule-zbv", "schedule --schedule zb-v --pp 1000 --microbatches 100000", {}, r"exceeds the limit",
         "zb-v"),
    Case("limit-schedule-huge-int", "schedule --schedule 1f1b --pp 4 --microbatches " + "9" * 4000, {},
         r"exceeds the limit|invalid int", "microbatches"),
    Case("limit-pipeline-microbatches", PSIM, {"p.yaml": pipe(microbatches=10 ** 7)}, r"exceeds the limit",
         "pipeline"),
    Case("limit-pipeline-vpp", PSIM, {"p.yaml": pipe(vpp=10 ** 6, schedule="interleaved-1f1b")}, r"exceeds the limit",
         "pipeline"),
    Case("limit-pipeline-pp", PSIM, {"p.yaml": pipe(pp=10 ** 9)}, r"exceeds the limit", "pipeline"),
    Case("limit-pipeline-pp-2-53", PSIM, {"p.yaml": pipe(pp=2 ** 53)}, r"exceeds the limit", "pipeline"),
    Case("limit-global-batch", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 2000000000000, "
                                     "seq_len: 128}")}, r"exceeds the limit", "global_batch"),
    Case("limit-global-batch-float", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 2.0e+30, "
                                           "seq_len: 128}")}, r"must be an integer", "training.global_batch"),
    Case("limit-layers-inline", SIM, {"s.yaml": strat(model="{name: a, layers: 1000000, hidden: 64, heads: 4, "
                                      "vocab: 128}")}, r"over the limit of 10,000", "model.layers"),
    Case("limit-layers-preset-override", SIM, {"s.yaml": strat(model="{preset: gpt3-175b, layers: 20000}")},
         r"over the limit", "model.layers"),
    Case("limit-nodes", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1000000000}")},
         r"1,000,000,000 \* 8|over the limit of 1,048,576", "nodes"),
    Case("limit-nodes-file", SIM, {"s.yaml": strat(cluster="c.yaml"), "c.yaml": CLUSTER.replace("nodes: 1",
                                   "nodes: 200000")}, r"over the limit of 1,048,576", "nodes"),
    Case("limit-gpus-per-node", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, gpus_per_node: "
                                      "4000000}")}, r"over the limit", "gpus_per_node"),
    Case("limit-tp", SIM, {"s.yaml": strat(parallel="{tp: 2000000, pp: 2}")}, r"over the limit of 1,048,576",
         "parallel.tp"),
    Case("limit-dp", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, dp: 10000000}")}, r"over the limit",
         "parallel.dp"),
    Case("limit-seq-len", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, seq_len: 1073741824}")},
         r"over the limit of 16,777,216", "training.seq_len"),
    Case("limit-tokens-per-microbatch", SIM, {"s.yaml": strat(training="{micro_batch: 64, global_batch: 128, "
                                              "seq_len: 16777216}")}, r"tokens per microbatch", "micro_batch"),
    Case("limit-hidden", SIM, {"s.yaml": strat(model="{name: a, layers: 2, hidden: 10000000000, heads: 2, "
                               "vocab: 128}")}, r"over the limit of 16,777,216", "model.hidden"),
    Case("limit-vocab", SIM, {"s.yaml": strat(model="{name: a, layers: 2, hidden: 64, heads: 4, vocab: "
                              "100000000}")}, r"over the limit", "model.vocab"),
    Case("limit-tasks-operator", SIM, {"s.yaml": strat(model="{name: a, layers: 64, hidden: 64, heads: 4, vocab: "
                                       "128}", parallel="{tp: 2, pp: 1, dp: 4}", training="{micro_batch: 1, "
                                       "global_batch: 200000, seq_len: 128}")},
         r"would build about [\d,]+ tasks, over the limit of 5,000,000", "tasks", bound=100_000),
    Case("limit-tasks-set", [*SIM.split(), "--set", "model.layers=64", "--set", "training.global_batch=20000"], {},
         r"would build about [\d,]+ tasks", "tasks", bound=40_000),
    Case("limit-total-plan-recompute", "plan-recompute s.yaml --fidelity operator", {"s.yaml": strat(
         model="{name: a, layers: 64, hidden: 64, heads: 4, vocab: 128}", training="{micro_batch: 1, global_batch: "
         "1000, seq_len: 128}")}, r"plan-recompute \(up to 40 simulations of about [\d,]+ tasks\) would build about "
         r"[\d,]+ tasks, over the limit of 10,000,000", "plan-recompute", bound=10_000),
    Case("limit-total-compare", ["compare", "p.yaml", "--schedules", ",".join(["1f1b"] * 64)],
         {"p.yaml": pipe(microbatches=50000)},
         r"these 64 runs together would build about [\d,]+ tasks, over the limit of 10,000,000",
         "64 runs", bound=200_000),
    Case("limit-total-compare-files", ["compare"] + ["p.yaml"] * 8, {"p.yaml": pipe(pp=4, microbatches=150000)},
         r"these 8 runs together would build about", "8 runs", bound=1_200_000),
    Case("limit-trace-tasks", "simulate p.yaml --trace t.json", {"p.yaml": pipe(microbatches=300000)},
         r"--trace: this run has about 2,400,000 tasks, over the limit of 1,000,000 for a trace", "--trace"),
    Case("limit-what-if-count", [*PSIM.split(), "--mode", "delta"] + ["--what-if", "F=1"] * 65, {},
         r"65 --what-if changes: give at most 64", "--what-if"),
    Case("limit-csv-big-stage", PSIM, {"p.yaml": pipe(schedule="custom", schedule_csv="big.csv"),
                                       "big.csv": "0F0,9999999999F0\n"}, r"9999999999F0 implies", "9999999999F0"),
    Case("limit-csv-big-mb", PSIM, {"p.yaml": pipe(schedule="custom", schedule_csv="big.csv"),
                                    "big.csv": "0F0,0B999999999999\n1F0,1B0\n"}, r"implies", "0B999999999999"),
    Case("limit-csv-strategy", SIM, {"s.yaml": strat() + "schedule: {name: custom, csv: big.csv}\n",
                                     "big.csv": "0F0,0B0\n1F0,1F88888888888888\n"}, r"implies", "schedule.csv"),
)

# --------------------------------------------------------------------------- messages that must stay small and fast
add(
    Case("bomb-recompute-layers", SIM, {"s.yaml": bomb_in("training", "recompute_layers")},
         r"unknown key 'bomb'|recompute_layers", "bomb"),
    Case("bomb-in-value", SIM, {"s.yaml": "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
                                "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\n"
                                "e: &e [*d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e]\n"
                                "g: &g [*f, *f, *f, *f, *f, *f, *f, *f]\n" + strat(training="{micro_batch: 1, "
                                "global_batch: 8, seq_len: 128, recompute_layers: *g}")},
         r"unknown key 'a'", "a"),
)
BOMB_STRAT = ("x: &a [x, x, x, x, x, x, x, x]\n" + "".join(
    f"x{i}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 8) + "]\n" for i in range(7)))
for sec, key in [("training", "recompute_layers"), ("parallel", "layers_per_stage"), ("training", "precision"),
                 ("parallel", "tp"), ("options", "profile"), ("training", "recompute")]:
    # the anchors live inside the section itself, under keys the section does not know
    add(Case(f"bomb-{sec}-{key}", SIM, {"s.yaml": strat(**{sec: None}) + f"{sec}:\n" + "".join(
        "  " + line + "\n" for line in BOMB_STRAT.splitlines()) + f"  {key}: *h\n"},
        r"unknown key|must be", f"{sec}."))
for sec in ("model", "cluster", "schedule"):
    # the section itself is the bomb: a list whose items are the anchored levels
    add(Case(f"bomb-top-{sec}", SIM, {"s.yaml": strat(**{sec: None}) + f"{sec}:\n" + "".join(
        "  - " + line.split(": ", 1)[1] + "\n" for line in BOMB_STRAT.splitlines())}, r"must be", sec))
HUGE = "z" * 1_000_000
for sec, key in [("training", "precision"), ("training", "recompute"), ("options", "fidelity"),
                 ("options", "overlap_handoff")]:
    add(Case(f"huge-string-{key}", SIM, {"s.yaml": strat(**({sec: None} if sec == "training" else {})) + f"{sec}: {{"
             + ("micro_batch: 1, global_batch: 8, seq_len: 128, " if sec == "training" else "") + f"{key}: {HUGE}}}\n"},
             r"is not one of", f"{sec}.{key}"))
add(
    Case("huge-string-schedule", SIM, {"s.yaml": strat() + f"schedule: {HUGE}\n"}, r"is not known", "schedule"),
    Case("huge-string-model", SIM, {"s.yaml": strat(model=HUGE)}, r"neither a preset nor a file|not a usable file",
         "model"),
    Case("huge-string-cluster", SIM, {"s.yaml": strat(cluster=HUGE)}, r"unknown cluster preset|not a usable file",
         "cluster"),
    Case("huge-key", SIM, {"s.yaml": strat() + f"{HUGE}: 1\n"}, r"not valid YAML: .*could not find expected ':'",
         "s.yaml"),
    Case("huge-explicit-key", SIM, {"s.yaml": strat() + f"? {HUGE}\n: 1\n"}, r"unknown key 'zzz", "zzz"),
    Case("huge-set-value", [*SIM.split(), "--set", "training.precision=" + HUGE], {}, r"is not one of",
         "training.precision"),
    Case("huge-set-key", [*SIM.split(), "--set", HUGE + "=1"], {}, r"unknown key", "zzz"),
    Case("divisors-hidden-heads", SIM, {"s.yaml": strat(model="{name: a, layers: 2, hidden: 10000001, heads: 2, "
                                        "vocab: 128}")}, r"model\.hidden=10000001 is not divisible by model\.heads=2",
         "model.hidden"),
    Case("divisors-heads-prime", SIM, {"s.yaml": strat(model="{name: a, layers: 2, hidden: 16777213, heads: "
                                       "16777213, vocab: 128}", parallel="{tp: 2, pp: 2}")},
         r"parallel\.tp = 2 must divide model\.heads = 16777213 .*choose tp in \[1, 16777213\]", "parallel.tp"),
    Case("divisors-layers", SIM, {"s.yaml": strat(model="{name: a, layers: 9973, hidden: 64, heads: 4, vocab: 128}")},
         r"does not split evenly .* choose pp\*vpp in \[1, 9973\]", "model.layers"),
    Case("divisors-kv-heads", SIM, {"s.yaml": strat(model="{name: a, layers: 2, hidden: 64, heads: 4, kv_heads: 3, "
                                    "vocab: 128}")}, r"not divisible by model\.kv_heads=3", "kv_heads"),
    Case("huge-layers-per-stage", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, layers_per_stage: [" +
                                        ", ".join(["1"] * 20000) + "]}")}, r"has 20000 entries but pp\*vpp = 2",
         "layers_per_stage"),
    Case("huge-recompute-layers", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, seq_len: 128, "
                                        "recompute_layers: [" + ", ".join(["full"] * 20000) + "]}")},
         r"has 20000 entries but the model has 2 layers", "recompute_layers"),
    Case("huge-moe-layers", SIM, {"s.yaml": strat(model="{name: a, layers: 2, hidden: 64, heads: 4, vocab: 128, "
                                  "experts: 4, top_k: 1, moe_layers: [" + ", ".join(["7"] * 20000) + "]}")},
         r"moe_layers has \[7, 7, 7, 7, \.\.\.\]", "moe_layers"),
)

# --------------------------------------------------------------------------- output paths
TR = "simulate p.yaml --trace"
add(
    Case("out-trace-dir", f"{TR} adir", {}, r"--trace 'adir' is a directory", "adir"),
    Case("out-trace-missing-parent", f"{TR} no/such/dir/t.json", {}, r"folder 'no/such/dir' does not exist; create it "
         r"or pass --mkdir", "no/such/dir"),
    Case("out-trace-parent-is-file", f"{TR} p.yaml/x.json", {}, r"'p.yaml' is not a folder", "p.yaml"),
    Case("out-trace-input", f"{TR} p.yaml", {}, r"is an input file of this run", "--trace 'p.yaml'"),
    Case("out-trace-input-dotslash", f"{TR} ./p.yaml", {}, r"is an input file", "p.yaml"),
    Case("out-trace-input-csv", "simulate q.yaml --trace ok.csv", {"q.yaml": pipe(schedule="custom",
                                                                                  schedule_csv="ok.csv")},
         r"input file", "ok.csv"),
    Case("out-trace-input-model", "simulate s.yaml --trace m.yaml", {"s.yaml": strat(model="m.yaml")},
         r"input file", "m.yaml"),
    Case("out-trace-input-cluster", "simulate s.yaml --trace c.yaml", {"s.yaml": strat(cluster="c.yaml")},
         r"input file", "c.yaml"),
    Case("out-trace-input-profile", "simulate s.yaml --trace prof.csv",
         {"s.yaml": strat() + "options: {profile: prof.csv}\n"}, r"input file", "prof.csv"),
    Case("out-trace-input-hf", "simulate s.yaml --trace hf.json", {"s.yaml": strat(model="hf.json")},
         r"input file", "hf.json"),
    Case("out-trace-empty", [*TR.split(), ""], {}, r"--trace '' is empty", "--trace"),
    Case("out-trace-blank", [*TR.split(), "   "], {}, r"is empty", "--trace"),
    Case("out-trace-nul", [*TR.split(), "a\x00b"], {}, r"NUL byte", "--trace"),
    Case("out-trace-readonly", f"{TR} ro.json", {"ro.json": "{}\n"}, r"read-only", "ro.json", readonly=("ro.json",)),
    Case("out-trace-dev-full", f"{TR} /dev/full", {}, r"cannot write --trace '/dev/full' \(No space left on device\)",
         "/dev/full"),
    Case("out-trace-then-bad-flag", f"{TR} t.json --what-if F=2", {}, r"--what-if needs --mode delta", "--what-if"),
    Case("out-trace-then-bad-file", "simulate s.yaml --trace t.json", {"s.yaml": strat(parallel="{tp: 3, pp: 2}")},
         r"parallel\.tp = 3 must divide", "parallel.tp"),
    Case("out-trace-long-name", f"{TR} {'n' * 300}.json", {}, r"cannot be used|cannot write|too long", "--trace"),
    Case("out-plot-dir", "compare p.yaml --schedules 1f1b,gpipe --plot adir", {}, r"--plot 'adir' is a directory",
         "adir"),
    Case("out-plot-parent-file", "compare p.yaml --schedules 1f1b --plot p.yaml/x.png", {}, r"not a folder",
         "p.yaml"),
    Case("out-plot-input", "compare p.yaml --schedules 1f1b --plot p.yaml", {}, r"input file", "p.yaml"),
    Case("out-plot-input-second-file", "compare p.yaml s.yaml --plot s.yaml", {}, r"input file", "s.yaml"),
    Case("out-plot-missing-parent", "compare p.yaml --schedules 1f1b --plot a/b/c.png", {}, r"pass --mkdir", "a/b"),
    Case("out-plot-empty", ["compare", "p.yaml", "--plot", ""], {}, r"is empty", "--plot"),
    Case("out-memory-plot-dir", "memory s.yaml --plot adir", {}, r"is a directory", "adir"),
    Case("out-memory-plot-input", "memory s.yaml --plot s.yaml", {}, r"input file", "s.yaml"),
    Case("out-memory-plot-missing", "memory s.yaml --plot x/y.png", {}, r"does not exist", "x"),
    Case("out-memory-plot-readonly", "memory s.yaml --plot ro.png", {"ro.png": "old"}, r"read-only", "ro.png",
         readonly=("ro.png",)),
    Case("out-schedule-dir", "schedule --schedule 1f1b --pp 2 --microbatches 2 -o adir", {}, r"is a directory",
         "adir"),
    Case("out-schedule-missing", "schedule --schedule 1f1b --pp 2 --microbatches 2 -o q/r.csv --csv", {},
         r"pass --mkdir", "q"),
    Case("out-schedule-then-bad", "schedule --schedule nope --pp 2 --microbatches 2 -o out.txt", {},
         r"unknown schedule 'nope'", "nope"),
    Case("out-schedule-dev-full", "schedule --schedule 1f1b --pp 2 --microbatches 2 -o /dev/full", {},
         r"No space left on device", "/dev/full"),
)

# --------------------------------------------------------------------------- command-line arguments
add(
    Case("cli-compare-comma", "compare p.yaml --schedules ,", {}, r"--schedules ',' names no schedule", "--schedules"),
    Case("cli-compare-commas-spaces", ["compare", "p.yaml", "--schedules", " , ,"], {}, r"names no schedule",
         "--schedules"),
    Case("cli-compare-empty", ["compare", "p.yaml", "--schedules", ""], {}, r"names no schedule", "--schedules"),
    Case("cli-compare-custom", "compare p.yaml --schedules custom", {}, r"--schedules custom: a custom schedule needs",
         "custom"),
    Case("cli-compare-unknown", "compare p.yaml --schedules 1f1b,zb-h3", {}, r"unknown schedule 'zb-h3' \(did you "
         r"mean 'zb-h1'\?\)", "zb-h3"),
    Case("cli-compare-bad-vpp", "compare p.yaml --schedules interleaved-1f1b:x", {}, r"chunk count", "interleaved"),
    Case("cli-compare-zero-vpp", "compare p.yaml --schedules interleaved-1f1b:0", {}, r"chunk count", "interleaved"),
    Case("cli-compare-huge-vpp", "compare p.yaml --schedules interleaved-1f1b:99999999999", {}, r"chunk count",
         "interleaved"),
    Case("cli-compare-unicode-digit", "compare p.yaml --schedules interleaved-1f1b:\u0663", {}, r"chunk count",
         "interleaved"),
    Case("cli-compare-vpp-limit", "compare p.yaml --schedules interleaved-1f1b:999999", {}, r"exceeds the limit",
         "interleaved"),
    Case("cli-compare-two-files-schedules", "compare p.yaml s.yaml --schedules 1f1b", {}, r"exactly one file",
         "--schedules"),
    Case("cli-compare-too-many", ["compare", "p.yaml", "--schedules", ",".join(["1f1b"] * 100)], {},
         r"at most 64", "--schedules"),
    Case("cli-compare-bad-second", "compare p.yaml t.yaml", {"t.yaml": pipe(pp=0)}, r"pipeline\.pp = 0 must be >= 1",
         "pipeline.pp"),
    Case("cli-pipeline-zbv-default-vpp", PSIM, {"p.yaml": pipe(schedule="zb-v", microbatches=4)},
         r"places 2 stages per rank but pipeline\.vpp = 1: set pipeline\.vpp: 2", "pipeline.vpp"),
    Case("cli-pipeline-dualpipev-default-vpp", PSIM, {"p.yaml": pipe(schedule="dualpipe-v", microbatches=8)},
         r"set pipeline\.vpp: 2", "pipeline.vpp"),
    Case("cli-pipeline-zbv-vpp3", PSIM, {"p.yaml": pipe(schedule="zb-v", vpp=3)}, r"vpp must be 1 or 2", "vpp"),
    Case("cli-pipeline-1f1b-vpp2", PSIM, {"p.yaml": pipe(vpp=2)}, r"vpp must be 1", "vpp"),
    Case("cli-pipeline-unknown-schedule", PSIM, {"p.yaml": pipe(schedule="1f1c")}, r"not a known schedule \(did you "
         r"mean '1f1b'\?\)", "pipeline.schedule"),
    Case("cli-pipeline-schedule-int", PSIM, {"p.yaml": pipe(schedule=7)}, r"must be a string", "pipeline.schedule"),
    Case("cli-pipeline-csv-list", PSIM, {"p.yaml": pipe(schedule="custom", schedule_csv=["a.csv"])},
         r"schedule_csv = \['a.csv'\] must be the path", "schedule_csv"),
    Case("cli-pipeline-csv-missing", PSIM, {"p.yaml": pipe(schedule="custom", schedule_csv="none.csv")},
         r"file not found", "none.csv"),
    Case("cli-pipeline-csv-dir", PSIM, {"p.yaml": pipe(schedule="custom", schedule_csv="adir")}, r"file not found",
         "adir"),
    Case("cli-pipeline-not-mapping", PSIM, {"p.yaml": "pipeline: [1, 2]\n"}, r"pipeline must be a mapping",
         "pipeline"),
    Case("cli-pipeline-lists-length", PSIM, {"p.yaml": pipe(forward_ms=[1.0, 2.0, 3.0])}, r"has 3 values but pp\*vpp",
         "forward_ms"),
    Case("cli-pipeline-bi-over-b", PSIM, {"p.yaml": pipe(backward_input_ms=5.0)}, r"negative here", "backward_weight_ms"),
    Case("cli-strategy-schedule-csv-list", SIM, {"s.yaml": strat() + "schedule: {name: custom, csv: [a]}\n"},
         r"schedule\.csv = \['a'\] must be the path", "schedule.csv"),
    Case("cli-strategy-model-nul", SIM, {"s.yaml": strat(model='"a\\0b.yaml"')}, r"not a usable file name|file not found", "model"),
    Case("cli-strategy-cluster-nul", SIM, {"s.yaml": strat(cluster='"c\\0.yaml"')}, r"not a usable file name|file not found",
         "cluster"),
    Case("cli-strategy-model-long-name", SIM, {"s.yaml": strat(model="a" * 5000 + ".yaml")},
         r"not a usable file name|file not found", "model"),
    Case("cli-strategy-cluster-dir", SIM, {"s.yaml": strat(cluster="adir")}, r"is a directory", "adir"),
    Case("cli-strategy-model-dir", SIM, {"s.yaml": strat(model="adir")}, r"directory without config.json", "adir"),
    Case("cli-memory-pipeline", "memory p.yaml", {}, r"is a pipeline description", "p.yaml"),
    Case("cli-plan-recompute-pipeline", "plan-recompute p.yaml", {}, r"plan-recompute needs a strategy file",
         "p.yaml"),
    Case("cli-set-no-equals", f"{SIM} --set parallel.tp", {}, r"must look like section\.key=value", "--set"),
    Case("cli-set-empty-key", f"{SIM} --set =3", {}, r"the key before '=' must be a dotted field name", "--set"),
    Case("cli-set-dot-key", f"{SIM} --set parallel..tp=3", {}, r"dotted field name", "--set"),
    Case("cli-set-into-scalar", f"{SIM} --set model.x=3", {"s.yaml": strat(model="llama3-8b")},
         r"'model' is not a section", "model"),
    Case("cli-set-unknown", f"{SIM} --set parallel.tpp=2", {}, r"unknown key 'parallel\.tpp' \(did you mean 'tp'\?\)",
         "parallel.tpp"),
    Case("cli-set-section-to-list", f"{SIM} --set parallel=[1]", {}, r"parallel must be a mapping", "parallel"),
    Case("cli-set-yaml-error", [*SIM.split(), "--set", "parallel.tp=[1"], {}, r"must be an integer", "parallel.tp"),
    Case("cli-argparse-pp-text", "schedule --schedule 1f1b --pp two --microbatches 2", {},
         r"execsim schedule: argument --pp: invalid int value: 'two' \(see 'execsim schedule --help'\)", "--pp"),
    Case("cli-argparse-missing", "schedule --pp 2 --microbatches 2", {}, r"the following arguments are required: "
         r"--schedule", "--schedule"),
    Case("cli-argparse-unknown-flag", f"{SIM} --trcae t.json", {}, r"unrecognized arguments: --trcae", "--trcae"),
    Case("cli-argparse-unknown-command", "simulat s.yaml", {}, r"invalid choice: 'simulat'", "simulat"),
    Case("cli-argparse-no-command", [], {}, r"required: COMMAND", "COMMAND"),
    Case("cli-argparse-fidelity", f"{SIM} --fidelity fast", {}, r"invalid choice: 'fast'", "--fidelity"),
    Case("cli-argparse-mode", f"{SIM} --mode half", {}, r"invalid choice: 'half'", "--mode"),
    Case("cli-argparse-json-csv", "schedule --schedule 1f1b --pp 2 --microbatches 2 --json --csv", {},
         r"not allowed with argument", "--csv"),
    Case("cli-schedule-negative-pp", "schedule --schedule 1f1b --pp -2 --microbatches 2", {},
         r"pp must be a positive integer, got -2", "pp"),
    Case("cli-schedule-zero-mb", "schedule --schedule 1f1b --pp 2 --microbatches 0", {},
         r"microbatches must be a positive integer", "microbatches"),
    Case("cli-schedule-unknown", "schedule --schedule 1f1c --pp 2 --microbatches 2", {},
         r"unknown schedule '1f1c' \(did you mean '1f1b'\?\)", "1f1c"),
    Case("cli-schedule-huge-name", ["schedule", "--schedule", HUGE, "--pp", "2", "--microbatches", "2"], {},
         r"unknown schedule", "zzz"),
    Case("cli-schedule-dualpipev-few", "schedule --schedule dualpipe-v --pp 4 --microbatches 2", {},
         r"microbatches must be >= 2\*pp", "microbatches"),
)

# --------------------------------------------------------------------------- profile CSV
PS = strat() + "options: {profile: prof.csv}\n"
for tag, row in [("nan", "nan"), ("inf", "inf"), ("neg-inf", "-inf"), ("negative", "-1"), ("huge", "1e300"),
                 ("text", "fast"), ("empty", "")]:
    add(Case(f"profile-time-{tag}", SIM, {"s.yaml": PS, "prof.csv": PROFILE_HEADER + PROFILE_ROW.replace("12.5", row)},
             r"time_us = .* (must be a finite number|is not a number)", "line 2"))
add(
    Case("profile-missing-column", SIM, {"s.yaml": PS, "prof.csv": "gpu,dtype,op,pass,shape\n"}, r"lacks column\(s\) "
         r"time_us", "prof.csv"),
    Case("profile-empty-file", SIM, {"s.yaml": PS, "prof.csv": ""}, r"lacks column", "prof.csv"),
    Case("profile-bad-pass", SIM, {"s.yaml": PS, "prof.csv": PROFILE_HEADER + PROFILE_ROW.replace(",fwd,", ",bwd,")},
         r"pass = 'bwd' must be one of fwd, bwd_input, bwd_weight", "line 2"),
    Case("profile-short-row", SIM, {"s.yaml": PS, "prof.csv": PROFILE_HEADER + "H100-SXM-80GB,bf16,attn_out\n"},
         r"line 2 has fewer cells than the header", "line 2"),
    Case("profile-duplicate-row", SIM, {"s.yaml": PS, "prof.csv": PROFILE_HEADER + PROFILE_ROW + PROFILE_ROW},
         r"line 3 repeats line 2", "line 3"),
    Case("profile-unused-op-typo", SIM, {"s.yaml": PS, "prof.csv": PROFILE_HEADER + PROFILE_ROW +
                                         PROFILE_ROW.replace("attn_out", "atn_out")},
         r"line 3 .*matches no operator of this run \(1 of 2 rows unused\)", "line 3"),
    Case("profile-unused-shape", SIM, {"s.yaml": PS, "prof.csv": PROFILE_HEADER + PROFILE_ROW.replace("128x64x32x1",
                                       "1x1x1x1")}, r"matches no operator.*this run's 'attn_out' shapes: 128x64x32x1",
         "line 2"),
    Case("profile-other-gpu", SIM, {"s.yaml": PS, "prof.csv": PROFILE_HEADER + PROFILE_ROW.replace("H100-SXM-80GB",
                                    "A100-SXM-80GB")},
         r"measured on a100-sxm-80gb but the cluster's GPU is H100-SXM-80GB", "options.profile_gpu"),
    Case("profile-gpu-not-in-rows", SIM, {"s.yaml": strat() + "options: {profile: prof.csv, profile_gpu: cpu}\n"},
         r"options.profile_gpu = 'cpu' but profile .* has rows for h100-sxm-80gb", "profile_gpu"),
    Case("profile-unused-gpu", SIM, {"s.yaml": PS, "prof.csv": PROFILE_HEADER + PROFILE_ROW + PROFILE_ROW.replace(
        "H100-SXM-80GB", "A100-SXM-80GB")}, r"gpu a100-sxm-80gb.*matches no operator", "line 3"),
    Case("profile-unused-dtype", SIM, {"s.yaml": PS, "prof.csv": PROFILE_HEADER + PROFILE_ROW.replace("bf16", "fp16")},
         r"dtype fp16.*matches no operator", "line 2"),
    Case("profile-missing-file", SIM, {"s.yaml": strat() + "options: {profile: none.csv}\n"}, r"does not exist",
         "none.csv"),
    Case("profile-is-dir", SIM, {"s.yaml": strat() + "options: {profile: adir}\n"}, r"is a directory", "adir"),
    Case("profile-not-string", SIM, {"s.yaml": strat() + "options: {profile: [a]}\n"}, r"must be the path of a profile",
         "options.profile"),
    Case("profile-nul", SIM, {"s.yaml": PS, "prof.csv": PROFILE_HEADER + "a\x00b\n"}, r"NUL byte", "prof.csv"),
    Case("profile-bad-quote", SIM, {"s.yaml": PS, "prof.csv": PROFILE_HEADER + 'a,"b\n'},
         r"not valid CSV|fewer cells", "prof.csv"),
)

# --------------------------------------------------------------------------- schedule CSV
CS = lambda csv: {"p.yaml": pipe(schedule="custom", schedule_csv="x.csv"), "x.csv": csv}
add(
    Case("csv-bad-cell", PSIM, CS("0F0,0X0\n1F0,1B0\n"), r"cannot parse action '0X0'", "x.csv"),
    Case("csv-empty", PSIM, CS(""), r"empty", "x.csv"),
    Case("csv-only-blank", PSIM, CS(",,,\n,,\n"), r"empty|no actions", "x.csv"),
    Case("csv-deadlock", PSIM, CS("0B0,0F0\n1F0,1B0\n"), r"x.csv", "x.csv"),
    Case("csv-missing-backward", PSIM, CS("0F0\n1F0,1B0\n"), r"x.csv", "x.csv"),
    Case("csv-stage-two-ranks", PSIM, CS("0F0,0B0\n0F1,1B0\n"), r"also appears on rank", "x.csv"),
    Case("csv-negative", PSIM, CS("0F0,-1B0\n"), r"cannot parse action", "x.csv"),
    Case("csv-too-many-ranks", PSIM, CS(BASE_FILES["ok.csv"] + "2F0,2B0\n"), r"x.csv", "x.csv"),
    Case("csv-huge-number", PSIM, CS("0F0," + "9" * 5000 + "F0\n"), r"implies|cannot parse|x.csv", "x.csv"),
    Case("csv-mb-mismatch", PSIM, {**CS(BASE_FILES["ok.csv"]), "p.yaml": pipe(schedule="custom", schedule_csv="x.csv",
                                   microbatches=8)}, r"has 4 microbatches but pipeline\.microbatches = 8", "x.csv"),
)

# --------------------------------------------------------------------------- cluster and model files
add(
    Case("cluster-unknown-key", SIM, {"s.yaml": strat(cluster="c.yaml"), "c.yaml": CLUSTER + "nodez: 2\n"},
         r"unknown field 'nodez' \(did you mean 'nodes'\?\)", "nodez"),
    Case("cluster-zero-nodes", SIM, {"s.yaml": strat(cluster="c.yaml"), "c.yaml": CLUSTER.replace("nodes: 1",
                                     "nodes: 0")}, r"out of range", "nodes"),
    Case("cluster-efficiency-over-1", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, nic_efficiency: "
                                            "1.5}")}, r"out of range", "nic_efficiency"),
    Case("cluster-gpu-unknown", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, gpu: H200x}")},
         r"unknown GPU 'H200x'", "H200x"),
    Case("cluster-gpu-list", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, gpu: [a]}")},
         r"must be a catalog GPU name", "gpu"),
    Case("cluster-list-file", SIM, {"s.yaml": strat(cluster="c.yaml"), "c.yaml": "- 1\n"}, r"expected a mapping",
         "c.yaml"),
    Case("cluster-preset-typo", SIM, {"s.yaml": strat(cluster="dgx-h10")}, r"unknown cluster preset 'dgx-h10'",
         "dgx-h10"),
    Case("cluster-missing-file", SIM, {"s.yaml": strat(cluster="nope.yaml")}, r"file not found", "nope.yaml"),
    Case("cluster-topology", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, network_topology: ring}")},
         r"is not one of", "network_topology"),
    Case("model-file-unknown-key", SIM, {"s.yaml": strat(model="m.yaml"), "m.yaml": BASE_FILES["m.yaml"] +
                                         "layer: 3\n"}, r"unknown key 'model\.layer' \(did you mean 'layers'\?\)",
         "model.layer"),
    Case("model-file-missing-field", SIM, {"s.yaml": strat(model="m.yaml"), "m.yaml": "layers: 2\nhidden: 64\n"},
         r"missing required field 'model\.heads'", "model.heads"),
    Case("model-file-negative", SIM, {"s.yaml": strat(model="m.yaml"), "m.yaml": BASE_FILES["m.yaml"].replace(
         "vocab: 128", "vocab: -128")}, r"must be >= 0|positive integer", "vocab"),
    Case("model-mlp-typo", SIM, {"s.yaml": strat(model="{name: a, layers: 2, hidden: 64, heads: 4, vocab: 128, "
                                 "mlp: swigl}")}, r"is not one of gelu, swiglu, geglu, squared-relu \(did you mean 'swiglu'\?\)", "model.mlp"),
    Case("model-preset-typo", SIM, {"s.yaml": strat(model="llama3-8")}, r"neither a preset", "llama3-8"),
    Case("model-name-list", SIM, {"s.yaml": strat(model="{name: [a], layers: 2, hidden: 64, heads: 4, vocab: 128}")},
         r"model\.name = \['a'\] must be a string", "model.name"),
    Case("model-int", SIM, {"s.yaml": strat(model="7")}, r"must be a preset name, a file path or a mapping", "model"),
    Case("model-moe-index", SIM, {"s.yaml": strat(model="{name: a, layers: 2, hidden: 64, heads: 4, vocab: 128, "
                                  "experts: 4, top_k: 1, moe_layers: [5]}")}, r"indices must be integers in 0\.\.1",
         "moe_layers"),
    Case("model-top-k", SIM, {"s.yaml": strat(model="{name: a, layers: 2, hidden: 64, heads: 4, vocab: 128, "
                              "experts: 4, top_k: 9}")}, r"top_k = 9 must be in 1\.\.4", "top_k"),
)

# --------------------------------------------------------------------------- strategy structure
add(
    Case("strategy-parallel-list", SIM, {"s.yaml": strat(parallel="[1, 2]")}, r"parallel must be a mapping",
         "parallel"),
    Case("strategy-training-string", SIM, {"s.yaml": strat(training="fast")}, r"training must be a mapping",
         "training"),
    Case("strategy-missing-model", SIM, {"s.yaml": strat(model=None)}, r"missing required section 'model'", "model"),
    Case("strategy-missing-cluster", SIM, {"s.yaml": strat(cluster=None)}, r"missing required section 'cluster'",
         "cluster"),
    Case("strategy-missing-global-batch", SIM, {"s.yaml": strat(training="{micro_batch: 1}")},
         r"missing required field 'training\.global_batch'", "training.global_batch"),
    Case("strategy-unknown-top", SIM, {"s.yaml": strat() + "paralel: {}\n"}, r"did you mean 'parallel'", "paralel"),
    Case("strategy-schedule-int", SIM, {"s.yaml": strat() + "schedule: 3\n"}, r"must be a schedule name", "schedule"),
    Case("strategy-schedule-zbv-vpp1", SIM, {"s.yaml": strat() + "schedule: zb-v\n"}, r"set parallel\.vpp: 2",
         "schedule"),
    Case("strategy-global-batch-indivisible", SIM, {"s.yaml": strat(training="{micro_batch: 3, global_batch: 8, "
                                                    "seq_len: 128}")}, r"must be a multiple of", "global_batch"),
    Case("strategy-world-mismatch", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, dp: 3}")}, r"!= world size 8",
         "dp"),
    Case("strategy-zero-7", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, zero: 7}")}, r"must be 0, 1, 2 or 3",
         "parallel.zero"),
    Case("strategy-lps-bool", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, layers_per_stage: [true, 1]}")},
         r"list of non-negative integers", "layers_per_stage"),
    # issue 27: parallel folding, FP8 recipes and FP8 parameters
    Case("strategy-etp-zero", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, etp: 0}")}, r"must be >= 1",
         "parallel.etp"),
    Case("strategy-etp-dense", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, etp: 1}")}, r"has no experts; drop etp",
         "parallel.etp"),
    Case("strategy-etp-ffn", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, ep: 2, etp: 5, sp: true}", model="{name: a, layers: 2, hidden: 64, heads: 4, vocab: 128, experts: 8, top_k: 2, expert_ffn: 96}")},
         r"must divide model\.expert_ffn = 96", "parallel.etp"),
    Case("strategy-etp-mesh", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, ep: 8, etp: 2, sp: true}", model="{name: a, layers: 2, hidden: 64, heads: 4, vocab: 128, experts: 8, top_k: 2, expert_ffn: 96}")},
         r"must divide the 4 GPUs of a pipeline stage", "parallel.etp"),
    Case("strategy-ep-over-dp-no-etp", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, ep: 4, sp: true}", model="{name: a, layers: 2, hidden: 64, heads: 4, vocab: 128, experts: 8, top_k: 2, expert_ffn: 96}")},
         r"or set parallel\.etp", "ep"),
    Case("strategy-fp8-recipe-unknown", SIM, {"s.yaml": strat(options="{fp8_recipe: mxfp4}")}, r"one of",
         "fp8_recipe"),
    Case("strategy-fp8-recipe-bf16", SIM, {"s.yaml": strat(options="{fp8_recipe: rowwise}")},
         r"applies to training\.precision: fp8", "fp8_recipe"),
    Case("strategy-mxfp8-hopper", SIM, {"s.yaml": strat(options="{fp8_recipe: mxfp8}", training="{micro_batch: 1, "
                                      "global_batch: 8, seq_len: 128, precision: fp8}")}, r"needs Blackwell", "mxfp8"),
    Case("strategy-fp8-param-gather-bf16", SIM, {"s.yaml": strat(options="{fp8_param_gather: true}")},
         r"set precision: fp8", "fp8_param_gather"),
    Case("strategy-fp8-param-gather-str", SIM, {"s.yaml": strat(options="{fp8_param_gather: 'yes'}")},
         r"true or false", "fp8_param_gather"),
    Case("cluster-gpus-over-nodes", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, gpus: 9}")},
         r"gpus = 9 must be an integer the 1 nodes of 8 GPUs hold", "gpus"),
    Case("cluster-gpus-float", SIM, {"s.yaml": strat(cluster="{preset: gb200-nvl72, gpus: 100.5}")},
         r"gpus", "gpus"),
    Case("strategy-offload-negative", SIM, {"s.yaml": strat(options="{activation_offload_layers: -1}")},
         r"must be >= 0", "activation_offload_layers"),
    Case("strategy-offload-float", SIM, {"s.yaml": strat(options="{activation_offload_layers: 1.5}")},
         r"must be an integer", "activation_offload_layers"),
    Case("cluster-host-link-zero", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, host_link_gbps: 0}")},
         r"host_link_gbps", "host_link_gbps"),
    Case("strategy-recompute-layers-bad", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, "
                                                "seq_len: 128, recompute_layers: [full, most]}")},
         r"must be a list with one of none, selective, full", "recompute_layers"),
)

# --------------------------------------------------------------------------- valid controls (exit 0, nothing harmed)
add(
    Case("ok-tiny-strategy", SIM, {}, code=0),
    Case("ok-pipeline", PSIM, {}, code=0),
    Case("ok-bom", SIM, {"s.yaml": "\ufeff" + strat()}, code=0),
    Case("ok-merge-key-override", SIM, {"s.yaml": strat(parallel=None) + "parallel:\n  <<: {tp: 1, pp: 2}\n  tp: 2\n"},
         code=0),
    Case("ok-trace", f"{TR} t.json", {}, code=0, creates=("t.json",)),
    Case("ok-trace-overwrite", f"{TR} t.json", {"t.json": "old\n"}, code=0, creates=("t.json",)),
    Case("ok-trace-mkdir", f"{TR} out/sub/t.json --mkdir", {}, code=0, creates=("out/sub/t.json",)),
    Case("ok-trace-dev-null", f"{TR} /dev/null", {}, code=0),
    Case("ok-json", f"{PSIM} --json", {}, code=0),
    Case("ok-json-zero-time", "compare z.yaml --schedules 1f1b,gpipe --json",
         {"z.yaml": pipe(forward_ms=0.0, backward_ms=0.0, p2p_ms=0.0)}, code=0),
    Case("ok-schedule-output", "schedule --schedule 1f1b --pp 2 --microbatches 2 --csv -o s.csv", {}, code=0,
         creates=("s.csv",)),
    Case("ok-profile", SIM, {"s.yaml": PS}, code=0),
    Case("ok-hf", SIM, {"s.yaml": strat(model="hf.json")}, code=0),
    Case("ok-hf-null-tie", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(tie_word_embeddings=None)}, code=0),
    Case("ok-custom-csv", PSIM, {"p.yaml": pipe(schedule="custom", schedule_csv="ok.csv")}, code=0),
    Case("ok-set", f"{SIM} --set parallel.tp=1 --set parallel.pp=1", {}, code=0, bound=5000),
    Case("ok-json-file", "simulate s.json", {"s.json": json.dumps({"pipeline": PIPE})}, code=0),
    Case("ok-compare-schedules", "compare p.yaml --schedules 1f1b,gpipe,zb-h1", {}, code=0, bound=4000),
    Case("ok-whatif", [*PSIM.split(), "--mode", "delta", "--what-if", "F=1.5"], {}, code=0),
    Case("ok-seq-len-at-limit", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, seq_len: "
                                      "16777216}", model="{name: a, layers: 2, hidden: 64, heads: 4, vocab: 128, "
                                      "max_seq: 16777216}")}, code=0),
)

# --------------------------------------------------------------------------- second round (issue 29)
# Harm: --trace-dir goes through the checked, atomic writer (simulator/outputs/files.py).
TD = "simulate p.yaml --trace-dir"
add(
    Case("r2-tracedir-empty", [*TD.split(), ""], {}, r"--trace-dir '' is empty", "--trace-dir"),
    Case("r2-tracedir-is-file", f"{TD} ok.csv", {}, r"is a file, not a folder", "ok.csv"),
    Case("r2-tracedir-missing-parent", f"{TD} no/such/d", {}, r"folder 'no/such' does not exist.*--mkdir", "no/such"),
    Case("r2-tracedir-readonly-folder", f"{TD} ro", {"ro/keep.txt": "x\n"}, r"--trace-dir 'ro': the folder is not "
         r"writable", "ro", readonly=("ro",)),
    Case("r2-tracedir-input-named-rank", "simulate s.yaml --trace-dir .", {"s.yaml": strat(model="rank_0.json"),
                                                                          "rank_0.json": hf()},
         r"--trace-dir '\./rank_0\.json' is an input file of this run", "rank_0.json"),
    Case("r2-tracedir-input-is-strategy", "simulate rank_1.json --trace-dir .", {"rank_1.json": json.dumps(
         {"pipeline": PIPE})}, r"rank_1\.json' is an input file", "rank_1.json"),
    Case("r2-tracedir-rank-is-folder", f"{TD} d", {"d/rank_0.json/x": "x\n"}, r"'d/rank_0\.json' is a directory",
         "rank_0.json"),
    Case("r2-tracedir-rank-readonly", f"{TD} d", {"d/rank_1.json": "{}\n"}, r"'d/rank_1\.json' is read-only",
         "rank_1.json", readonly=("d/rank_1.json",)),
    Case("r2-ok-tracedir", f"{TD} d", {}, code=0, creates=("d/rank_0.json", "d/rank_1.json")),
    Case("r2-ok-tracedir-overwrite", f"{TD} d", {"d/rank_0.json": "old\n", "d/other.json": "kept\n"}, code=0,
         creates=("d/rank_0.json", "d/rank_1.json")),
    Case("r2-ok-tracedir-dot-ranks", f"{TD} . --trace-ranks 1", {}, code=0, creates=("rank_1.json",)),
)
# Work proportional to a number the user gives: bounded before the work.
add(
    Case("r2-trace-ranks-huge", f"{TD} d --trace-ranks 0-99999999999999", {}, r"names a rank over the limit of "
         r"1,048,575", "--trace-ranks"),
    Case("r2-trace-ranks-many-ranges", ["simulate", "p.yaml", "--trace", "t.json", "--trace-ranks",
                                        ",".join(["0-1048575"] * 2000)], {}, r"names rank 1048575 but this run "
         r"simulates ranks 0-1", "--trace-ranks"),
    Case("r2-trace-ranks-outside-run", f"{TD} d --trace-ranks 0,7", {}, r"names rank 7 but this run simulates ranks "
         r"0-1", "--trace-ranks"),
    Case("r2-trace-ranks-unicode-digit", ["simulate", "p.yaml", "--trace", "t.json", "--trace-ranks", "\u0663"], {},
         r"is not a rank or a range", "--trace-ranks"),
    Case("r2-mtp-layers-huge", SIM, {"s.yaml": strat(model="{name: a, layers: 2, hidden: 64, heads: 4, vocab: 128, "
                                     "mtp_layers: 100000}")}, r"model\.mtp_layers = 100000 .* over the limit of 10,000",
         "mtp_layers"),
    Case("r2-stages-limit", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 4096}",
                                                  parallel="{tp: 1, pp: 8192, vpp: 4}",
                                                  training="{micro_batch: 1, global_batch: 4, seq_len: 128}")},
         r"pp\*vpp = 8192\*4 = 32768 pipeline stages is over the limit of 16,384", "pp*vpp"),
    Case("r2-input-dev-zero", "simulate /dev/zero", {}, r"'/dev/zero' is not a regular file", "/dev/zero"),
    Case("r2-model-dev-null", SIM, {"s.yaml": strat(model="/dev/null")}, r"model file '/dev/null' is not a regular "
         r"file", "/dev/null"),
    Case("r2-csv-dev-zero", PSIM, {"p.yaml": pipe(schedule="custom", schedule_csv="/dev/zero")},
         r"not a regular file|file not found", "/dev/zero"),
)
# Internal errors that must be one clear line.
add(
    Case("r2-cluster-gpu-aliases-int", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, gpu: {base: "
                                             "H100-SXM-80GB, aliases: 5}}")},
         r"^execsim: error: cluster\.gpu: field 'aliases' = 5 must be a list of strings", "aliases"),
    Case("r2-cluster-gpu-aliases-dict", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, gpu: {base: "
                                              "H100-SXM-80GB, aliases: {a: 1}}}")}, r"must be a list of strings",
         "cluster.gpu"),
)
# Silently accepted before: settings that do not apply are refused, naming the field and the fix.
MOE = "{name: a, layers: 2, hidden: 64, heads: 4, vocab: 128, experts: 4, top_k: 1}"
for key, val in (("moe_imbalance", "1.5"), ("moe_capacity_factor", "1.25"), ("moe_max_nodes", "2")):
    add(Case(f"r2-dense-{key}", SIM, {"s.yaml": strat() + f"options: {{{key}: {val}}}\n"},
             rf"options\.{key} = {val} applies to MoE models, but model 'tiny' has no experts", f"options.{key}"))
add(
    Case("r2-moe-capacity-below-1", SIM, {"s.yaml": strat(model=MOE, parallel="{tp: 2, pp: 2, sp: true}") +
                                          "options: {moe_capacity_factor: 0.5}\n"},
         r"options\.moe_capacity_factor = 0\.5 must be >= 1", "moe_capacity_factor"),
    Case("r2-dense-moe_routing", SIM, {"s.yaml": strat() + "options: {moe_routing: random}\n"},
         r"options\.moe_routing = 'random' applies to MoE models, but model 'tiny' has no experts", "moe_routing"),
    Case("r2-moe-routing-unknown", SIM, {"s.yaml": strat(model=MOE, parallel="{tp: 2, pp: 2, sp: true}") +
                                         "options: {moe_routing: even}\n"},
         r"options\.moe_routing = 'even' .*learned, aux_loss, aux_loss_free, random, balanced", "moe_routing"),
    Case("r2-moe-routing-and-imbalance", SIM, {"s.yaml": strat(model=MOE, parallel="{tp: 2, pp: 2, sp: true}") +
                                               "options: {moe_routing: random, moe_imbalance: 1.2}\n"},
         r"options\.moe_routing = 'random' derives .* options\.moe_imbalance = 1\.2 already gives; keep one",
         "moe_routing"),
    Case("r2-ok-moe-options", SIM, {"s.yaml": strat(model=MOE, parallel="{tp: 2, pp: 2, sp: true}") +
                                    "options: {moe_imbalance: 1.5, moe_capacity_factor: 1.25}\n"}, code=0, bound=5000),
    Case("r2-fp8-recipe-fp16", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, seq_len: 128, "
                                     "precision: fp16}") + "options: {fp8_recipe: tensorwise}\n"},
         r"options\.fp8_recipe = 'tensorwise' applies to training\.precision: fp8 \(it is 'fp16'\)", "fp8_recipe"),
    Case("r2-fp8-recipe-bf16", SIM, {"s.yaml": strat() + "options: {fp8_recipe: blockwise}\n"},
         r"applies to training\.precision: fp8", "options.fp8_recipe"),
    Case("r2-reshard-zero0", SIM, {"s.yaml": strat() + "options: {reshard_after_forward: true}\n"},
         r"options\.reshard_after_forward = true applies to ZeRO-3 .* parallel\.zero = 0", "reshard_after_forward"),
    Case("r2-reshard-zero1", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, zero: 1}") +
                                   "options: {reshard_after_forward: false}\n"}, r"parallel\.zero = 1",
         "reshard_after_forward"),
    Case("r2-pair-sms-serial", SIM, {"s.yaml": strat() + "options: {pair_comm_sms: 20}\n"},
         r"options\.pair_comm_sms = 20 applies to options\.pair_overlap: concurrent", "pair_comm_sms"),
    Case("r2-pair-sms-over-gpu", SIM, {"s.yaml": strat() + "options: {pair_overlap: concurrent, pair_comm_sms: 500}\n"},
         # on 1F1B (no pairs) the options are refused first (issue 42); the SM bound on DualPipe is in
         # tests/test_deepseek.py test_pair_options_validated
         r"options\.pair_overlap = 'concurrent' sets DualPipe's .* schedule '1f1b' has none", "pair_overlap"),
    # Megatron's combined 1F1B (options.overlap_moe_expert_parallel_comm) and its companions
    Case("a2a-overlap-dense", SIM, {"s.yaml": strat() + "options: {overlap_moe_expert_parallel_comm: true}\n"},
         r"overlap_moe_expert_parallel_comm = true overlaps the expert all-to-all, but model 'tiny' has no experts",
         "overlap_moe_expert_parallel_comm"),
    Case("a2a-overlap-ep1", SIM, {"s.yaml": strat(model=MOE, parallel="{tp: 2, pp: 2, sp: true}") +
                                  "options: {overlap_moe_expert_parallel_comm: true}\n"},
         r"but parallel\.ep = 1 \(Megatron-LM: only supported with expert model parallelism\)",
         "overlap_moe_expert_parallel_comm"),
    Case("a2a-overlap-gpipe", SIM, {"s.yaml": strat(model=MOE, parallel="{tp: 2, pp: 2, ep: 2, sp: true}") +
                                    "schedule: gpipe\noptions: {overlap_moe_expert_parallel_comm: true}\n"},
         r"merges the steady-state steps of 1f1b or interleaved-1f1b .*schedule = 'gpipe'",
         "overlap_moe_expert_parallel_comm"),
    Case("a2a-overlap-full-recompute", SIM, {"s.yaml": strat(
        model=MOE, parallel="{tp: 2, pp: 2, ep: 2, sp: true}",
        training="{micro_batch: 1, global_batch: 8, seq_len: 128, recompute: full}") +
        "options: {overlap_moe_expert_parallel_comm: true}\n"},
         r"with full recompute: Megatron-LM refuses it", "overlap_moe_expert_parallel_comm"),
    Case("a2a-overlap-not-bool", SIM, {"s.yaml": strat() + "options: {overlap_moe_expert_parallel_comm: often}\n"},
         r"options\.overlap_moe_expert_parallel_comm", "overlap_moe_expert_parallel_comm"),
    Case("a2a-overlap-with-pairs", SIM, {"s.yaml": strat(model=MOE, parallel="{tp: 2, pp: 2, ep: 2, sp: true}") +
                                         "options: {overlap_moe_expert_parallel_comm: true, pair_overlap: concurrent}\n"},
         r"options\.pair_overlap = 'concurrent' sets DualPipe's pairs; .* drop pair_overlap", "pair_overlap"),
    Case("a2a-delay-wgrad-alone", SIM, {"s.yaml": strat() + "options: {delay_wgrad_compute: true}\n"},
         r"options\.delay_wgrad_compute = true applies with options\.overlap_moe_expert_parallel_comm: true",
         "delay_wgrad_compute"),
    Case("a2a-delay-wgrad-not-bool", SIM, {"s.yaml": strat() + "options: {delay_wgrad_compute: 3}\n"},
         r"options\.delay_wgrad_compute", "delay_wgrad_compute"),
    Case("a2a-sms-alone", SIM, {"s.yaml": strat() + "options: {moe_flex_dispatcher_num_sms: 20}\n"},
         r"options\.moe_flex_dispatcher_num_sms = 20 applies with options\.overlap_moe_expert_parallel_comm: true",
         "moe_flex_dispatcher_num_sms"),
    Case("a2a-sms-negative", SIM, {"s.yaml": strat() + "options: {moe_flex_dispatcher_num_sms: -4}\n"},
         r"options\.moe_flex_dispatcher_num_sms", "moe_flex_dispatcher_num_sms"),
    Case("a2a-sms-over-gpu", SIM, {"s.yaml": strat(model=MOE, parallel="{tp: 2, pp: 2, ep: 2, sp: true}") +
                                   "options: {overlap_moe_expert_parallel_comm: true, moe_flex_dispatcher_num_sms: 200}\n"},
         r"options\.moe_flex_dispatcher_num_sms = 200 leaves no SMs for compute on H100-SXM-80GB \(132 SMs\)",
         "moe_flex_dispatcher_num_sms"),
    Case("a2a-ok", SIM, {"s.yaml": strat(model=MOE, parallel="{tp: 2, pp: 2, ep: 2, sp: true}") +
                         "options: {overlap_moe_expert_parallel_comm: true, delay_wgrad_compute: true, "
                         "moe_flex_dispatcher_num_sms: 24}\n"}, code=0, bound=5000),
    # Megatron's shared-expert overlap (options.moe_shared_expert_overlap)
    Case("shared-overlap-not-bool", SIM, {"s.yaml": strat() + "options: {moe_shared_expert_overlap: sometimes}\n"},
         r"options\.moe_shared_expert_overlap", "moe_shared_expert_overlap"),
    Case("shared-overlap-no-shared-experts", SIM, {"s.yaml": strat(model=MOE, parallel="{tp: 2, pp: 2, ep: 2, sp: true}") +
                                                   "options: {moe_shared_expert_overlap: true}\n"},
         r"options\.moe_shared_expert_overlap = true .* has no shared experts", "moe_shared_expert_overlap"),
    Case("shared-overlap-dense", SIM, {"s.yaml": strat() + "options: {moe_shared_expert_overlap: true}\n"},
         r"options\.moe_shared_expert_overlap = true .* has no shared experts", "moe_shared_expert_overlap"),
    Case("shared-overlap-with-combined", SIM, {"s.yaml": strat(model=MOE, parallel="{tp: 2, pp: 2, ep: 2, sp: true}") +
                                               "options: {moe_shared_expert_overlap: true, "
                                               "overlap_moe_expert_parallel_comm: true}\n"},
         r"options\.moe_shared_expert_overlap = true with options\.overlap_moe_expert_parallel_comm: Megatron-LM "
         r"refuses the pair", "moe_shared_expert_overlap"),
    Case("shared-overlap-ok", SIM, {"s.yaml": strat(model=MOE[:-1] + ", shared_experts: 1}",
                                             parallel="{tp: 2, pp: 2, ep: 2, sp: true}") +
                                    "options: {moe_shared_expert_overlap: true}\n"}, code=0, bound=5000),
    # Megatron's CPU optimizer offload (options.optimizer_cpu_offload) and its companions
    Case("cpu-opt-fraction-alone", SIM, {"s.yaml": strat() + "options: {optimizer_offload_fraction: 0.5}\n"},
         r"options\.optimizer_offload_fraction = 0\.5 applies with options\.optimizer_cpu_offload: true",
         "optimizer_offload_fraction"),
    Case("cpu-opt-overlap-alone", SIM, {"s.yaml": strat() + "options: {overlap_cpu_optimizer_d2h_h2d: true}\n"},
         r"options\.overlap_cpu_optimizer_d2h_h2d = true applies with options\.optimizer_cpu_offload: true",
         "overlap_cpu_optimizer_d2h_h2d"),
    Case("cpu-opt-fraction-above-1", SIM, {"s.yaml": strat() + "options: {optimizer_cpu_offload: true, "
                                           "optimizer_offload_fraction: 1.5}\n"},
         r"options\.optimizer_offload_fraction = 1\.5 must be in \[0, 1\]", "optimizer_offload_fraction"),
    Case("cpu-opt-fraction-negative", SIM, {"s.yaml": strat() + "options: {optimizer_cpu_offload: true, "
                                            "optimizer_offload_fraction: -0.1}\n"},
         r"options\.optimizer_offload_fraction", "optimizer_offload_fraction"),
    Case("cpu-opt-not-bool", SIM, {"s.yaml": strat() + "options: {optimizer_cpu_offload: sometimes}\n"},
         r"options\.optimizer_cpu_offload", "optimizer_cpu_offload"),
    Case("cpu-opt-host-memory-zero", SIM, {"s.yaml": strat(cluster="{preset: dgx-h100, nodes: 1, host_memory_gbps: 0}")},
         r"host_memory_gbps", "host_memory_gbps"),
    Case("cpu-opt-ok", SIM, {"s.yaml": strat() + "options: {optimizer_cpu_offload: true, optimizer_offload_fraction: "
                             "0.5, overlap_cpu_optimizer_d2h_h2d: true}\n"}, code=0, bound=5000),
    Case("r2-price-pipeline", f"{PSIM} --price 2.5", {}, r"--price 2\.5 applies to strategy files.*pipeline "
         r"description", "--price"),
    Case("r2-fidelity-pipeline", f"{PSIM} --fidelity coarse", {}, r"--fidelity coarse applies to strategy files",
         "--fidelity"),
    Case("r2-fidelity-pipeline-report", "report p.yaml -o r.html --fidelity operator", {}, r"--fidelity operator "
         r"applies to strategy files", "--fidelity"),
    Case("r2-fidelity-pipeline-compare", "compare p.yaml --schedules 1f1b,gpipe --fidelity coarse", {},
         r"--fidelity coarse applies to strategy files", "--fidelity"),
    Case("r2-recompute-and-layers", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, seq_len: 128, "
                                          "recompute: full, recompute_layers: [full, none]}")},
         r"training\.recompute = 'full' and training\.recompute_layers are both given", "recompute_layers"),
    Case("r2-ok-recompute-layers-alone", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, "
                                               "seq_len: 128, recompute_layers: [full, none]}")}, code=0),
    Case("r2-seq-len-over-hf-max", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(max_position_embeddings=64)},
         r"training\.seq_len = 128 is longer than model .* supports \(model\.max_seq = 64; "
         r"max_position_embeddings", "max_position_embeddings"),
    Case("r2-ok-hf-no-max-position", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(max_position_embeddings=None)},
         code=0),
    Case("r2-schedule-dualpipe-csv", "schedule --schedule dualpipe --pp 4 --microbatches 8 --vpp 2 --csv", {},
         r"'dualpipe' runs 2 pipelines .* PyTorch action CSV cannot carry", "--json", bound=10_000),
    Case("r2-ok-schedule-dualpipe-json", "schedule --schedule dualpipe --pp 4 --microbatches 8 --vpp 2 --json", {},
         code=0, bound=10_000),
)
HF_MOE = dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_experts=4, num_experts_per_tok=1,
              moe_intermediate_size=32, head_dim=16)
HF_GEMMA = dict(architectures=["Gemma2ForCausalLM"], model_type="gemma2", head_dim=16, sliding_window=64)
MOE_PAR = "{tp: 2, pp: 2, sp: true}"
LORA_T = "{micro_batch: 1, global_batch: 8, seq_len: 128, lora: %s}"
add(
    Case("r2-hf-mlp-only-layers-out", SIM, {"s.yaml": strat(model="hf.json", parallel=MOE_PAR),
                                            "hf.json": hf(**HF_MOE, mlp_only_layers=[99])},
         r"hf\.json mlp_only_layers has \[99\]: layer indices must be in 0\.\.1", "mlp_only_layers"),
    Case("r2-ok-hf-mlp-only-layers", SIM, {"s.yaml": strat(model="hf.json", parallel=MOE_PAR),
                                           "hf.json": hf(**HF_MOE, mlp_only_layers=[1])}, code=0, bound=5000),
    Case("r2-hf-layer-types-string", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(**HF_GEMMA,
                                           layer_types="full")}, r"layer_types = 'full' must be a list", "layer_types"),
    Case("r2-hf-layer-types-typo", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(
         **HF_GEMMA, layer_types=["sliding_attention", "full_atention"])}, r"'full_atention' is not\) \(did you mean "
         r"'full_attention'\?\)", "layer_types"),
    Case("r2-hf-layer-types-length", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(
         **HF_GEMMA, layer_types=["sliding_attention", "full_attention", "full_attention"])},
         r"layer_types has 3 entries but num_hidden_layers = 2", "layer_types"),
    Case("r2-hf-layer-types-no-window", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(
         **{**HF_GEMMA, "sliding_window": None}, layer_types=["sliding_attention", "full_attention"])},
         r"sliding_attention layers but sliding_window is None", "layer_types"),
    Case("r2-ok-hf-layer-types", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(
         **HF_GEMMA, layer_types=["sliding_attention", "full_attention"])}, code=0, bound=5000),
)
# YAML 1.1 oddities: read by the YAML 1.2 core schema, so they stay text and the field check says so.
add(
    Case("r2-yaml-sexagesimal", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, seq_len: 2:08}")},
         r"training\.seq_len = '2:08' must be an integer \(it was read as text", "training.seq_len"),
    Case("r2-yaml-underscore", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, seq_len: 1_28}")},
         r"training\.seq_len = '1_28' must be an integer", "training.seq_len"),
    Case("r2-yaml-yes", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, sp: yes}")},
         r"parallel\.sp = 'yes' must be true or false \(YAML 1\.2", "parallel.sp"),
    Case("r2-yaml-on-option", SIM, {"s.yaml": strat() + "options: {flash_attention: on}\n"},
         r"options\.flash_attention = 'on' must be true or false", "options.flash_attention"),
    Case("r2-yaml-leading-zero", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 010, seq_len: 128}")},
         r"the number 010 has a leading zero", "s.yaml"),
    Case("r2-yaml-set-sexagesimal", f"{SIM} --set training.seq_len=2:08", {}, r"'2:08' must be an integer",
         "training.seq_len"),
    Case("r2-yaml-quoted-number", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, seq_len: 128, "
                                        "train_tokens: '1e12'}")}, r"train_tokens = '1e12' must be a number \(it was "
         r"read as text", "train_tokens"),
    Case("r2-ok-yaml-1e12", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 8, seq_len: 128, "
                                  "train_tokens: 1e12}")}, code=0),
    Case("r2-ok-yaml-set-1e12", f"{SIM} --set training.train_tokens=1e12", {}, code=0),
    Case("r2-ok-yaml-octal-explicit", SIM, {"s.yaml": strat(training="{micro_batch: 1, global_batch: 0o10, "
                                            "seq_len: 128}")}, code=0),
)
# Search flags: checked before the search, bounded before the work.
SE = "search s.yaml"
add(
    Case("r2-search-axis-zero-4", f"{SE} --axis zero=4", {}, r"--axis zero value '4' must be a ZeRO stage", "zero"),
    Case("r2-search-axis-twice", f"{SE} --axis tp=1 --axis tp=2", {}, r"--axis tp is given twice", "--axis tp"),
    Case("r2-search-axis-many", ["search", "s.yaml", "--axis", "micro_batch=" + ",".join(map(str, range(1, 30001)))],
         {}, r"--axis micro_batch lists more than 64 values", "micro_batch"),
    Case("r2-search-axis-repeated-value", f"{SE} --axis tp=2,2", {}, r"--axis tp lists 2 twice", "--axis tp"),
    Case("r2-search-axis-huge-value", f"{SE} --axis pp=99999999999", {}, r"must be a whole number in 1\.\.1,048,576",
         "pp"),
    Case("r2-search-axis-schedule", f"{SE} --axis schedule=1f1c", {}, r"--axis schedule value '1f1c' is not one of "
         r".*did you mean '1f1b'", "schedule"),
    Case("r2-search-axis-many-flags", ["search", "s.yaml"] + ["--axis", "tp=2"] * 30000, {}, r"--axis tp is given "
         r"twice", "--axis tp"),
    Case("r2-search-top-0", f"{SE} --top 0", {}, r"--top 0 must be >= 1", "--top"),
    Case("r2-search-budget-exhaustive", f"{SE} --budget 5", {}, r"--budget 5 applies to --method mcmc", "--budget"),
    Case("r2-search-start-exhaustive", f"{SE} --start random", {}, r"--start random applies to --method mcmc",
         "--start"),
    Case("r2-search-ray-address-local", f"{SE} --ray-address 10.0.0.1:6379", {}, r"--ray-address .* applies to "
         r"--backend ray", "--ray-address"),
    Case("r2-search-jobs-many", f"{SE} --jobs 100000", {}, r"--jobs 100000 is more worker processes than the \d+ "
         r"CPU", "--jobs"),
    Case("r2-search-train-tokens-inf", f"{SE} --train-tokens inf", {}, r"--train-tokens inf must be a positive finite",
         "--train-tokens"),
    Case("r2-search-deadline-nan", f"{SE} --deadline-days nan --train-tokens 1e9", {}, r"--deadline-days nan must be "
         r"a positive finite", "--deadline-days"),
    Case("r2-search-gpus-range-huge", f"{SE} --gpus-range 1:1000000000", {}, r"B = '1000000000' GPUs is over the "
         r"limit of 1,048,576", "--gpus-range"),
    Case("r2-search-grid-huge", [*SE.split(), "--gpus-range", "8:4096", "--axis", "micro_batch=" + ",".join(
         map(str, range(1, 65))), "--axis", "vpp=" + ",".join(map(str, range(1, 65))), "--axis",
         "schedule=1f1b,gpipe,zb-h1,interleaved-1f1b,looped-bfs,zb-v,dualpipe-v"], {},
         r"the search grid has [\d,]+ points over \d+ GPU count\(s\), over the limit of 600,000", "--axis"),
    Case("r2-search-budget-over-grid", f"{SE} --method mcmc --budget 1000000000 --axis tp=2 --axis micro_batch=1 "
         f"--axis recompute=none --axis zero=0 --axis pp=2 --axis vpp=1", {},
         r"--budget 1000000000 is more than the \d+ candidates", "--budget"),
)
# Valid input that was refused.
add(
    Case("r2-ok-csv-comma-in-name", PSIM, {"p.yaml": pipe(schedule="custom", schedule_csv="a,b.csv"),
                                           "a,b.csv": BASE_FILES["ok.csv"]}, code=0),
    Case("r2-import-block-recompute-over-stage", "import megatron m.sh --cluster dgx-h100 --nodes 1",
         {"m.sh": "pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
                  "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --vocab-size 128 "
                  "--recompute-granularity full --recompute-method block --recompute-num-layers 100\n"},
         r"recompute-num-layers = 100 with method 'block' .* a stage holds 4", "recompute-num-layers"),
)

# Megatron sizes and counts: 0, huge, and one-letter typos of a flag the importer reads (issue 29)
_MEG0 = ("pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
         "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --vocab-size 128 ")
add(
    Case("import-megatron-tp-zero", "import megatron m.sh --cluster dgx-h100 --nodes 1",
         {"m.sh": _MEG0 + "--tensor-model-parallel-size 0\n"}, r"--tensor-model-parallel-size = 0 must be an integer in \[1,",
         "--tensor-model-parallel-size"),
    Case("import-megatron-vpp-layers-zero", "import megatron m.sh --cluster dgx-h100 --nodes 1",
         {"m.sh": _MEG0 + "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 0\n"},
         r"--num-layers-per-virtual-pipeline-stage = 0 must be", "--num-layers-per-virtual-pipeline-stage"),
    Case("import-megatron-train-iters-2-66", "import megatron m.sh --cluster dgx-h100 --nodes 1",
         {"m.sh": _MEG0 + "--train-iters 73786976294838206464\n"}, r"--train-iters = 73786976294838206464 must be",
         "--train-iters"),
    Case("import-megatron-near-miss-flag", "import megatron m.sh --cluster dgx-h100 --nodes 1",
         {"m.sh": _MEG0 + "--overlap-grad-reduc\n"}, r"one letter from --overlap-grad-reduce", "--overlap-grad-reduc"),
)

# --------------------------------------------------------------------------- issue 27: importers
_MEG = ("A=(--num-layers 2 --hidden-size 64 --num-attention-heads 4)\n"
        "torchrun pretrain_gpt.py ${A[@]} --seq-length 128 --global-batch-size 8 --vocab-size 100 \\\n"
        "  --tensor-model-parallel-size $TP\n")
add(
    Case("import-megatron-unset-variable", "import megatron m.sh --cluster dgx-h100 --nodes 1", {"m.sh": _MEG},
         r"line 3: --tensor-model-parallel-size takes its value from \$TP, which the script never sets; give "
         r"--env TP=VALUE", "TP"),
    Case("import-megatron-env-malformed", "import megatron m.sh --cluster dgx-h100 --nodes 1 --env TP",
         {"m.sh": _MEG}, r"must be NAME=VALUE", "--env"),
    Case("import-megatron-unclosed-quote", "import megatron m.sh --cluster dgx-h100 --nodes 1",
         {"m.sh": "A='x\n"}, r"line 1: a ' quote is not closed", "quote"),
    Case("import-megatron-env-other-kind", "import nemo n.yaml --cluster dgx-h100 --env TP=2",
         {"n.yaml": "model: {}\n"}, r"--env sets shell variables of a Megatron launch script", "--env"),
    Case("import-nemo2-python", "import nemo r.py --cluster dgx-h100",
         {"r.py": "from nemo.collections import llm\nimport nemo_run as run\n"}, r"which recipe\? give --recipe FUNCTION",
         "--recipe"),
    Case("import-nemo-fp32", "import nemo n.yaml --cluster dgx-h100",
         {"n.yaml": "trainer: {num_nodes: 1, precision: 32}\nmodel: {num_layers: 2, hidden_size: 64, "
                    "num_attention_heads: 4, global_batch_size: 8, tokenizer: {type: gpt2}}\n"},
         r"trains in FP32", "trainer.precision"),
    Case("import-torchtitan-datetime", "import torchtitan t.toml --cluster dgx-h100 --nodes 1",
         {"t.toml": "[job]\ndump_folder = 2025-01-01\n[model]\nname = 'llama3'\nflavor = '8B'\n"},
         r"is a TOML date/time", "job.dump_folder"),
    Case("import-torchtitan-fp32", "import torchtitan t.toml --cluster dgx-h100 --nodes 1",
         {"t.toml": "[model]\nname = 'llama3'\nflavor = '8B'\n[training]\nmixed_precision_param = 'float32'\n"},
         r"FP32 training is not modeled", "mixed_precision_param"),
    Case("ok-import-megatron-env", "import megatron m.sh --cluster dgx-h100 --nodes 1 --env TP=2 -o o.yaml",
         {"m.sh": _MEG}, code=0, creates=("o.yaml",)),
)
# Chunked local attention (Llama 4 iRoPE): model.attention_chunk, model.global_attention_start
CHUNK_MODEL = "{name: c, layers: 4, hidden: 64, heads: 4, vocab: 128, attention_chunk: 32, global_attention_every: 4"
add(
    Case("chunk-negative", SIM, {"s.yaml": strat(model="{name: c, layers: 2, hidden: 64, heads: 4, vocab: 128, "
                                                 "attention_chunk: -8}")}, r"attention_chunk", "attention_chunk"),
    Case("chunk-and-window", SIM, {"s.yaml": strat(model=CHUNK_MODEL + ", sliding_window: 16}")},
         r"model\.sliding_window = 16 and model\.attention_chunk = 32: a local layer has one mask", "attention_chunk"),
    Case("chunk-start-out-of-range", SIM, {"s.yaml": strat(model=CHUNK_MODEL + ", global_attention_start: 4}")},
         r"model\.global_attention_start = 4 must be a layer index in 0\.\.3", "global_attention_start"),
    Case("chunk-start-without-every", SIM, {"s.yaml": strat(model="{name: c, layers: 4, hidden: 64, heads: 4, "
                                                            "vocab: 128, attention_chunk: 32, global_attention_start: 0}")},
         r"global_attention_start = 0 needs model\.global_attention_every", "global_attention_start"),
    Case("chunk-every-without-local", SIM, {"s.yaml": strat(model="{name: c, layers: 4, hidden: 64, heads: 4, "
                                                            "vocab: 128, global_attention_every: 4}")},
         r"global_attention_every = 4 needs model\.sliding_window > 0 or model\.attention_chunk > 0",
         "global_attention_every"),
    Case("ok-chunk", SIM, {"s.yaml": strat(model=CHUNK_MODEL + ", global_attention_start: 0}")}, code=0),
)
HF_LLAMA4 = dict(architectures=["Llama4ForCausalLM"], model_type="llama4_text", num_local_experts=2,
                 intermediate_size_mlp=128, attention_chunk_size=32, head_dim=16)
add(
    Case("hf-llama4-no-rope-length", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(**HF_LLAMA4,
                                                                                        no_rope_layers=[0, 1, 1])},
         r"no_rope_layers has 3 entries but num_hidden_layers = 2; give one per layer", "no_rope_layers"),
    Case("hf-llama4-moe-layers-out", SIM, {"s.yaml": strat(model="hf.json"), "hf.json": hf(**HF_LLAMA4,
                                                                                        moe_layers=[5])},
         r"moe_layers = \[5\] must be a list of layer indices in 0\.\.1", "moe_layers"),
    Case("ok-hf-llama4", SIM, {"s.yaml": strat(model="hf.json", parallel=MOE_PAR), "hf.json": hf(**HF_LLAMA4)},
         code=0, bound=5000),
)

# Issue 42 (third campaign): settings with nothing to act on are refused, not ignored; calibrate's traces
# are inputs; goodput and search values at the float range's edges; CSV decimals; timeline names.
TRACE = json.dumps({"distributedInfo": {"rank": 0}, "traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10, "tid": 1}]})
P1 = "{tp: 2, pp: 1}"
add(
    Case("r3-offload-with-pp", SIM, {"s.yaml": strat(options="{activation_offload_layers: 1}")},
         r"activation_offload_layers = 1 offloads activations, which Megatron-core does not support with pipeline "
         r"parallelism \(parallel\.pp = 2\)", "activation_offload_layers"),
    Case("r3-offload-all-layers", SIM, {"s.yaml": strat(parallel=P1, options="{activation_offload_layers: 2}")},
         r"activation_offload_layers = 2 must be less than the model's 2 layers", "activation_offload_layers"),
    Case("r3-offload-with-recompute", SIM, {"s.yaml": strat(parallel=P1, options="{activation_offload_layers: 1}",
                                                            training="{micro_batch: 1, global_batch: 8, seq_len: 128, "
                                                                     "recompute: selective}")},
         r"refuses with activation recomputation \(selective\)", "activation_offload_layers"),
    Case("r3-scatter-gather-sp", SIM, {"s.yaml": strat(parallel="{tp: 2, pp: 2, sp: true}",
                                                       options="{pipeline_scatter_gather: true}")},
         r"parallel\.sp = true already sends 1/tp", "pipeline_scatter_gather"),
    Case("r3-scatter-gather-pp1", SIM, {"s.yaml": strat(parallel=P1, options="{pipeline_scatter_gather: true}")},
         r"parallel\.pp = 1 leaves nothing to scatter", "pipeline_scatter_gather"),
    Case("r3-tp-comm-overlap-no-sp", SIM, {"s.yaml": strat(options="{tp_comm_overlap: true}")},
         r"needs parallel\.tp > 1 and sp: true \(tp = 2, sp = false\)", "tp_comm_overlap"),
    Case("r3-profile-gpu-no-profile", SIM, {"s.yaml": strat(options="{profile_gpu: cpu}")},
         r"options\.profile_gpu = 'cpu' .* but no profile is given", "profile_gpu"),
    Case("r3-cp-comm-cp1", SIM, {"s.yaml": strat(options="{cp_comm: ring}")}, r"but parallel\.cp = 1", "cp_comm"),
    Case("r3-p2p-overlap-pp1", SIM, {"s.yaml": strat(parallel=P1, options="{p2p_overlap: true}")},
         r"parallel\.pp = 1 has none", "p2p_overlap"),
    Case("r3-param-gather-zero0", SIM, {"s.yaml": strat(options="{overlap_param_gather: true}")},
         r"parallel\.zero = 0 gathers nothing", "overlap_param_gather"),
    Case("r3-pair-overlap-1f1b", SIM, {"s.yaml": strat(options="{pair_overlap: concurrent}")},
         r"schedule '1f1b' has none", "pair_overlap"),
    Case("r3-moe-max-nodes-one-node", SIM, {"s.yaml": strat(model=MOE, parallel=MOE_PAR,
                                                            options="{moe_max_nodes: 1}")},
         r"moe_max_nodes = 1 .* the cluster has one node", "moe_max_nodes"),
    Case("r4-moe-dispatcher-unknown", SIM, {"s.yaml": strat(model=MOE, parallel=MOE_PAR,
                                                            options="{moe_dispatcher: all_gather}")},
         r"options\.moe_dispatcher .*all_gather.* must be one of|is not one of", "moe_dispatcher"),
    Case("r4-moe-dispatcher-deepep", SIM, {"s.yaml": strat(model=MOE, parallel=MOE_PAR,
                                                           options="{moe_dispatcher: allgather, moe_max_nodes: 1}")},
         r"moe_dispatcher = 'allgather' with options\.moe_max_nodes, which prices DeepEP", "moe_dispatcher"),
    Case("r4-moe-dispatcher-dense", SIM, {"s.yaml": strat() + "options: {moe_dispatcher: allgather}\n"},
         r"options\.moe_dispatcher = 'allgather' applies to MoE models, but model 'tiny' has no experts",
         "options.moe_dispatcher"),
    Case("r4-cuda-graphs-unknown", SIM, {"s.yaml": strat(options="{cuda_graphs: per_layer}")},
         r"options\.cuda_graphs = 'per_layer' is not one of none, layers, full_iteration", "cuda_graphs"),
    Case("r4-cuda-graphs-torchtitan", SIM, {"s.yaml": strat(options="{cuda_graphs: layers, stack: torchtitan}")},
         r"options\.stack = 'torchtitan' has no CUDA graph capture", "cuda_graphs"),
    Case("r4-cuda-graphs-moe-dropless", SIM, {"s.yaml": strat(model=MOE, parallel=MOE_PAR,
                                                              options="{cuda_graphs: full_iteration}")},
         r"cuda_graphs = 'full_iteration' captures every MoE layer, but .* is dropless", "moe_capacity_factor"),
    # training.lora (taskgraph/lora.py): the rank against the targets and tp, targets the model lacks
    Case("r4-lora-not-mapping", SIM, {"s.yaml": strat(training=LORA_T % "16")}, r"training\.lora = 16 must be a mapping",
         "training.lora"),
    Case("r4-lora-rank-zero", SIM, {"s.yaml": strat(training=LORA_T % "{rank: 0}")}, r"training\.lora\.rank = 0 must be",
         "training.lora.rank"),
    Case("r4-lora-rank-over-min-dim", SIM, {"s.yaml": strat(training=LORA_T % "{rank: 66}")},
         r"training\.lora\.rank = 66 exceeds min\(in, out\) = 64 of 'qkv'", "training.lora.rank"),
    Case("r4-lora-rank-tp", SIM, {"s.yaml": strat(training=LORA_T % "{rank: 3}")},
         r"rank = 3 must be divisible by parallel\.tp = 2", "training.lora.rank"),
    Case("r4-lora-target-unknown", SIM, {"s.yaml": strat(training=LORA_T % "{rank: 4, targets: [q_proj]}")},
         r"'q_proj' is not a LoRA target; choose from qkv", "training.lora.targets"),
    Case("r4-lora-target-moe", SIM, {"s.yaml": strat(model=MOE, parallel=MOE_PAR,
                                                     training=LORA_T % "{rank: 4, targets: [mlp_down]}")},
         r"model 'a' has no 'mlp_down' layer", "training.lora.targets"),
    Case("ok-r4-lora", SIM, {"s.yaml": strat(training=LORA_T % "{rank: 4, dropout: 0.1, targets: [qkv, attn_out]}")},
         code=0),
    Case("r4-master-weights-megatron", SIM, {"s.yaml": strat(training="{global_batch: 8, seq_len: 128, master_weights: false}")},
         r"training\.master_weights = false .* needs a PyTorch FSDP2 stack, but options\.stack = 'megatron-te'",
         "master_weights"),
    Case("r4-master-weights-not-bool", SIM, {"s.yaml": strat(training="{global_batch: 8, seq_len: 128, master_weights: bf16}")},
         r"training\.master_weights", "master_weights"),
    Case("r4-master-weights-automodel-fp16", SIM, {"s.yaml": strat(training="{global_batch: 8, seq_len: 128, precision: fp16}",
                                                                   options="{stack: nemo-automodel}")},
         r"master_weights = false \(stack nemo-automodel's default\) with precision fp16", "master_weights"),
    Case("r3-profile-decimal-comma", SIM, {"s.yaml": strat(options="{profile: pc.csv}"),
                                           "pc.csv": PROFILE_HEADER + "h100-sxm-80gb,bf16,qkv,fwd,64x192x64x1,12,5\n"},
         r"line 2 has more cells than the header .* \(12\.5, not 12,5\)", "pc.csv"),
    Case("r3-timeline-txt-before-work", f"{PSIM} --timeline t.txt", {}, r"must end in \.csv or \.parquet",
         "t.txt", bound=0),
    Case("ok-r3-timeline-dot-csv", f"{PSIM} --timeline .csv", {}, code=0, creates=(".csv",)),
    Case("r3-search-price-huge", "search s.yaml --price 1e300", {}, r"--price = 1e\+300 must be .* at most 10,000",
         "--price", bound=0),
    Case("r3-search-tokens-huge", "search s.yaml --train-tokens 1e300", {}, r"over the limit of 1e\+18",
         "--train-tokens", bound=0),
    Case("r3-calibrate-output-is-trace", "calibrate s.yaml tr -o tr/rank0.json --no-simulate", {"tr/rank0.json": TRACE},
         r"--output 'tr/rank0\.json' is an input file of this run", "tr/rank0.json", bound=0),
    Case("r3-calibrate-rank-not-in-strategy", "calibrate s.yaml tr -o o.csv --no-simulate",
         {"tr/rank0.json": TRACE.replace('"rank": 0', '"rank": 9')}, r"is rank 9 but 's\.yaml' has ranks 0-7",
         "rank 9"),
    Case("r3-calibrate-negative-duration", "calibrate s.yaml tr -o o.csv --no-simulate",
         {"tr/rank0.json": TRACE.replace('"dur": 10', '"dur": -10')}, r"event 0 \('aten::mm'\) dur = -10 must be",
         "dur"),
    Case("r3-trace-inside-trace-dir", f"{TD} d --trace d/rank_0.json", {"d/keep.txt": "x\n"},
         r"--trace 'd/rank_0\.json' is a file --trace-dir 'd' writes: give them different files", "--trace", bound=0),
    Case("r3-goodput-shape-storm", "goodput s.yaml --days 1 --no-sweep --set goodput.failures.gpu.shape=0.01", {},
         r"goodput\.failures\.gpu\.shape = 0\.01 is under 0\.1", "shape"),
    Case("r3-goodput-exponent-overflow", ["goodput", "s.yaml", "--days", "1", "--no-sweep", "--set",
                                          "goodput.failures.j.per=job", "--set", "goodput.failures.j.rate_per_hour=1",
                                          "--set", "goodput.failures.j.ref_gpus=1", "--set",
                                          "goodput.failures.j.size_exponent=1e6"], {},
         r"goodput\.failures\.j: inf failures per hour", "goodput.failures.j"),
)
