"""``execsim import``: finish an imported strategy against its cluster, check it, write it as YAML.

The importers (:mod:`strategies.importers`) map flags and keys; what needs the cluster (world size,
torchtitan's data-parallel degree -1 and per-rank batch, GPUs per node the source states) is settled
here, and the result is resolved exactly as ``execsim simulate`` would, so a file this writes simulates.
"""
from __future__ import annotations

from typing import Any

from strategies.errors import ConfigError
from strategies.importers import Imported, import_config


def finish(imp: Imported) -> dict:
    """The strategy mapping of ``imp`` with the cluster-dependent fields filled in and checked."""
    from taskgraph.plan import resolve_cluster
    s = {k: (dict(v) if isinstance(v, dict) else v) for k, v in imp.strategy.items() if not k.startswith("_")}
    if imp.strategy.get("_recipe_gpus") is not None and s["cluster"].get("nodes") is None:
        s["cluster"] = dict(s["cluster"], nodes=recipe_nodes(imp, s["cluster"]))
    cl = resolve_cluster(s["cluster"], ".")
    world_run = imp.strategy.get("_world_size")     # a Megatron log's world_size
    if world_run is not None:
        if imp.strategy.get("_nodes_from_world"):
            if world_run % cl.gpus_per_node:
                raise ConfigError(f"{imp.source}: the log's world_size {world_run} is not a whole number of "
                                  f"{cl.name!r} nodes ({cl.gpus_per_node} GPUs each); pick the --cluster it ran on")
            s["cluster"] = {**s["cluster"], "nodes": world_run // cl.gpus_per_node}
            cl = resolve_cluster(s["cluster"], ".")
        elif world_run != cl.num_gpus:
            raise ConfigError(f"{imp.source}: the log's world_size is {world_run} GPUs but --nodes gives "
                              f"{cl.num_gpus} ({cl.nodes} x {cl.gpus_per_node}); drop --nodes or match it")
    gpn = imp.strategy.get("_gpus_per_node")
    if gpn is not None and str(gpn) != str(cl.gpus_per_node):
        raise ConfigError(f"{imp.source}: the source runs {gpn} GPUs per node but cluster preset "
                          f"{cl.name!r} has {cl.gpus_per_node}; pick a matching --cluster"
                          + (" or give --set num_gpus_per_node=" + str(cl.gpus_per_node) if imp.strategy.get("_source")
                             else ""))
    par, tr = s["parallel"], s["training"]
    world = cl.num_gpus
    model_par = par["tp"] * par["pp"] * par["cp"]
    if world % model_par and imp.strategy.get("_source"):
        raise ConfigError(f"{imp.source}: the recipe's layout tp({par['tp']}) * pp({par['pp']}) * cp({par['cp']}) = "
                          f"{model_par} GPUs does not fit the {world} GPUs of {cl.nodes} node(s) x "
                          f"{cl.gpus_per_node}; give --nodes N so that {model_par} divides N x {cl.gpus_per_node}")
    if world % model_par:
        raise ConfigError(f"{imp.source}: tp({par['tp']}) * pp({par['pp']}) * cp({par['cp']}) = {model_par} does not "
                          f"divide the cluster's {world} GPUs; change --nodes")
    dp = par.get("dp", world // model_par)
    if dp * model_par != world:
        raise ConfigError(f"{imp.source}: tp({par['tp']}) * pp({par['pp']}) * cp({par['cp']}) * dp({dp}) = "
                          f"{dp * model_par} != {world} GPUs of {cl.nodes} x {cl.gpus_per_node}; change --nodes")
    if "_local_batch" in imp.strategy:   # torchtitan: local_batch_size per data-parallel rank
        tr["global_batch"] = imp.strategy["_local_batch"] * dp
    par.pop("dp", None)
    every = imp.strategy.get("_recompute_every")
    if every:   # torchtitan selective_ac_option N: every N-th layer checkpointed whole (count from 1)
        from taskgraph.plan import resolve_model
        layers = resolve_model(s["model"], ".").layers
        tr.pop("recompute", None)
        tr["recompute_layers"] = ["full" if (i + 1) % every == 0 else "none" for i in range(layers)]
    if "_steps" in imp.strategy:
        tr["train_tokens"] = float(imp.strategy["_steps"] * tr["global_batch"] * tr["seq_len"])
    opts = s.get("options")
    if cl.nodes == 1 and isinstance(opts, dict) and "moe_max_nodes" in opts:
        # DeepEP's node-limited dispatch (a source's flex/deepep dispatcher) reaches one node when there
        # is one: the option would change nothing, and the strategy file refuses it on one node
        opts.pop("moe_max_nodes")
    return s


def recipe_nodes(imp: Imported, cluster: dict) -> int:
    """Nodes of a recipe sized in GPUs (Megatron-Bridge's ``_<N>gpu_``) on the cluster preset."""
    from taskgraph.plan import resolve_cluster
    gpn = resolve_cluster(dict(cluster, nodes=1), ".").gpus_per_node
    gpus = imp.strategy["_recipe_gpus"]
    if gpus % gpn:
        raise ConfigError(f"{imp.source}: the recipe is sized for {gpus} GPUs (its name), which is not whole nodes of "
                          f"{gpn} GPUs on {cluster['preset']}; give --nodes N")
    return gpus // gpn


def check(strategy: dict) -> None:
    """Resolve ``strategy`` as ``execsim simulate`` would (raises the same one-line errors)."""
    from strategies.strategy_file import parse_strategy
    from taskgraph.plan import resolve
    resolve(parse_strategy(strategy, "."))


def to_yaml(strategy: dict, imp: Imported, origin: str) -> str:
    """The strategy as a commented YAML strategy file."""
    import yaml
    head = [f"# Imported by `execsim import {imp.source}` from {origin}."]
    src = imp.strategy.get("_source")
    if src:
        head.append(f"# Source: {src['file']}, {src['recipe']}"
                    + (f"; framework defaults from {src['framework']} (strategies/data/recipe_defaults.yaml)"
                       if src.get("framework") else "") + ". Read statically, never executed.")
    head += [
            "# Settings of the source that execsim does not model (not represented below):"]
    if imp.unmodeled:
        line = ""
        for item in imp.unmodeled:
            if len(line) + len(item) > 95:
                head.append(f"#   {line.rstrip(', ')}")
                line = ""
            line += f"{item}, "
        head.append(f"#   {line.rstrip(', ')}")
    elif src:
        head[-1] = ("# Every setting of the recipe that execsim models is represented (logging, checkpointing and "
                    "data paths do not enter the simulation).")
    else:
        head[-1] = "# Every setting of the source is represented."
    body = yaml.safe_dump(strategy, sort_keys=False, default_flow_style=None, width=100)
    return "\n".join(head) + "\n" + body


def import_strategy(kind: str, text: str, *, origin: str, cluster: str | None = None, nodes: int | None = None,
                    vocab: int | None = None, env: dict | None = None, base_dir: str | None = None,
                    sets: dict | None = None, recipe: str | None = None) -> tuple[str, Imported]:
    """Import, finish, check; returns the YAML text and the :class:`Imported` record."""
    imp = import_config(kind, text, cluster=cluster, nodes=nodes, vocab=vocab, env=env, base_dir=base_dir,
                        sets=sets, recipe=recipe, origin=origin)
    strategy = finish(imp)
    check(strategy)
    return to_yaml(strategy, imp, origin), imp


def measured_vs_simulated(strategy_text: str, imp: Imported) -> str | None:
    """For a training log that reports its speed — Megatron's ``elapsed time per iteration (ms)``, or
    torchtitan's ``tps`` (tokens per second per GPU) — one line with the measured median (the first
    logged step excluded) beside the simulated iteration time; else None."""
    ms, tps = imp.strategy.get("_measured_iteration_ms"), imp.strategy.get("_measured_tps")
    if ms is None and not tps:
        return None
    import yaml

    from simulator.simulation.strategy import simulate_strategy
    from strategies.strategy_file import parse_strategy
    sim = simulate_strategy(parse_strategy(yaml.safe_load(strategy_text), "."))
    t = sim.training.iteration_time_s * 1e3
    how = "median of the logged iterations, the first excluded"
    if ms is None:
        # torchtitan: tps = a rank's tokens / (time x tp x pp x cp) (components/metrics.py, ParallelDims.
        # non_data_parallel_size), a rank's tokens per step = global batch x seq / dp: step = G s / (tps x GPUs)
        tr = sim.plan.strategy.training
        ms = tr.global_batch * tr.seq_len / (tps * sim.plan.num_gpus) * 1e3
        how = f"from the median logged tps {tps:,.0f} per GPU, the first step excluded"
    return f"iteration time: measured {ms:,.1f} ms ({how}), simulated {t:,.1f} ms ({(t - ms) / ms:+.1%})"


def summary(imp: Imported, limit: int = 25) -> str:
    """One warning line listing what the source sets and execsim does not model."""
    items: list[Any] = list(imp.unmodeled)
    more = f" ... and {len(items) - limit} more" if len(items) > limit else ""
    return f"{imp.source} settings not modeled (listed in the file header): {', '.join(items[:limit])}{more}"
