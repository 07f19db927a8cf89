"""A strategy file resolved for the run model: the fleet's failure rates merged with the file's, bad
nodes, failure domains, loss-spike rollbacks, checkpoint size, save / load times, restart from its parts,
the interval policy (asynchronous saves included), and elastic iteration times (re-simulated).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from simulator.goodput.closed_forms import daly_interval, optimal_interval_closed_form, young_interval
from simulator.goodput.fleets import component_rate_per_hour, fleet_components, load_data, load_failure_defaults
from simulator.goodput.model import DAY, HOUR, Component, RunModel, check_run_model
from strategies.errors import ConfigError
from strategies.goodput_file import GoodputSpec, check_days, parse_goodput
from strategies.limits import MAX_GOODPUT_DAYS

_FIELDS = ("rate_per_device_hour", "per", "detection_s", "needs_repair", "rate_per_hour", "ref_gpus",
           "size_exponent", "shape")


def merge_components(spec: GoodputSpec, num_gpus: int, num_nodes: int, defaults: dict | None = None
                     ) -> tuple[Component, ...]:
    """The fleet's components (``spec.fleet``; ``defaults`` replaces them) with the file's overrides; a
    new component must give its rate and ``per``. A ``per: job`` component counts once, its rate
    ``rate_per_hour x (gpus / ref_gpus) ** size_exponent`` (a job-level source that grows with size)."""
    if defaults is None:
        defaults = (load_failure_defaults() if spec.fleet == "llama3-405b-h100"
                    else fleet_components(spec.fleet))
    d = {k: dict(v) for k, v in defaults.items()}
    for o in spec.failures:
        if o.name not in d:
            rate = o.rate_per_hour if o.per == "job" else o.rate_per_device_hour
            if rate is None or o.per is None:
                from strategies.config import did_you_mean
                raise ConfigError(f"goodput.failures.{o.name} is not a component of fleet {spec.fleet}"
                                  f"{did_you_mean(o.name, d)} (components: {', '.join(d)}); a new component needs "
                                  f"per (gpu, node or job) and rate_per_device_hour (per: job: rate_per_hour)")
            d[o.name] = {"detection_s": 60.0, "needs_repair": o.per != "job", "source": "strategy file"}
        for k in _FIELDS:
            v = getattr(o, k)
            if v is not None:
                d[o.name][k] = v
                d[o.name]["source"] = "strategy file"
    out = []
    for name, v in d.items():
        if v["per"] == "job":
            v.setdefault("ref_gpus", num_gpus)
            v.setdefault("size_exponent", 1.0)
            if "rate_per_hour" not in v:
                raise ConfigError(f"goodput.failures.{name}: per: job needs rate_per_hour (failures per job-hour at "
                                  f"ref_gpus)")
            rate, count = component_rate_per_hour(v, num_gpus), 1
        else:
            if "rate_per_device_hour" not in v:
                raise ConfigError(f"goodput.failures.{name}: per: {v['per']} needs rate_per_device_hour")
            rate, count = float(v["rate_per_device_hour"]), (num_gpus if v["per"] == "gpu" else num_nodes)
        out.append(Component(name, rate, v["per"], count, float(v["detection_s"]), bool(v["needs_repair"]),
                             str(v.get("source", "")), shape=float(v.get("shape", 1.0))))
    return tuple(out)


def extra_components(spec: GoodputSpec, num_nodes: int, iteration_s: float) -> tuple[Component, ...]:
    """Bad nodes, failure domains and loss-spike rollbacks as components of the run model."""
    out = []
    lm = spec.lemons
    n_lemons = round(lm.fraction * num_nodes)
    if n_lemons and lm.rate_per_node_hour > 0:
        out.append(Component("lemon_nodes", lm.rate_per_node_hour, "lemon", n_lemons, lm.detection_s, False,
                             "strategy file (goodput.lemons)", drain_after=lm.drain_after))
    templates = load_data().get("domains") or {} if spec.domains else {}
    for dm in spec.domains:
        t = dict(templates.get(dm.name, {}))
        for k in ("rate_per_domain_hour", "detection_s", "repair_hours"):
            if getattr(dm, k) is not None:
                t[k] = getattr(dm, k)
        if "rate_per_domain_hour" not in t:
            from strategies.config import did_you_mean
            raise ConfigError(f"goodput.domains.{dm.name} has no rate: give rate_per_domain_hour, or name a template "
                              f"{did_you_mean(dm.name, templates)}({', '.join(templates)})")
        if dm.nodes > num_nodes:
            raise ConfigError(f"goodput.domains.{dm.name}.nodes = {dm.nodes} is more than the job's {num_nodes} nodes")
        out.append(Component(dm.name, float(t["rate_per_domain_hour"]), "domain", math.ceil(num_nodes / dm.nodes),
                             float(t.get("detection_s", 60.0)), True, str(t.get("source", "strategy file")),
                             shape=dm.shape, nodes_per_event=dm.nodes,
                             repair_s=float(t["repair_hours"]) * HOUR if "repair_hours" in t else None))
    rb = spec.rollbacks
    if rb.rate_per_day > 0:
        out.append(Component("loss_spike", rb.rate_per_day / 24.0, "job", 1, rb.detection_s, False,
                             "strategy file (goodput.rollbacks)", rollback_s=rb.steps_back * iteration_s))
    return tuple(out)


def restart_parts(spec: GoodputSpec, num_gpus: int) -> tuple:
    """((part, mean seconds), ...) of a restart, or () when the file gives ``restart_s`` only. Process
    group / NCCL initialisation grows linearly with the job (NCCL's bootstrap all-gathers every
    rank's address around a ring, ``bootstrapAllGather`` in src/bootstrap.cc: N - 1 steps)."""
    r = spec.restart
    if not r.parts:
        return ()
    return (("drain_s", r.drain_s), ("reschedule_s", r.reschedule_s), ("process_start_s", r.process_start_s),
            ("init_s", r.init_s + r.init_s_per_1000_gpus * num_gpus / 1000.0))


def checkpoint_bytes(plan) -> tuple[float, float]:
    """(bytes of one checkpoint, largest bytes one GPU writes): each parameter's 16-bit weight and the
    optimizer's state as the memory model holds it (``taskgraph.memory.saved_optimizer_state_bytes``: fp32
    master weight, momentum, variance, ZeRO Section 3.1, K = 12; bf16 moments without master weights;
    ``options.optimizer_dtypes``' masters and moments in the dtypes Megatron's distributed optimizer saves,
    megatron/core/optimizer/distrib_optimizer.py ``sharded_state_dict``) once, as a sharded (Megatron
    distributed / torch.distributed.checkpoint) save writes them; gradients are not saved. Per GPU from
    the static memory model (``taskgraph.memory.static_memory``)."""
    from taskgraph.memory import params_per_gpu, saved_optimizer_state_bytes
    s = plan.sizes
    per_param = 2 + saved_optimizer_state_bytes(plan.strategy)
    # every parameter once: the model's own count (with its MTP modules), not tp x a GPU's share, which
    # counts the TP-replicated norms and biases tp times and the routed experts 1/ep times
    counts = plan.model.param_breakdown()
    total = float((counts.total + counts.mtp) * per_param)
    # params_per_gpu: the parameters one GPU of each pipeline rank holds before ZeRO-3 partitioning
    held = params_per_gpu(plan)
    # a sharded save spreads each shard's bytes over the dp x cp ranks that hold it
    per_gpu = max(held.values()) * per_param / (s.dp * s.cp)
    return total, per_gpu


@dataclass
class GoodputSetup:
    """A strategy resolved for the run model: the model, the policy, and what it was derived from."""

    model: RunModel
    spec: GoodputSpec
    intervals: tuple          # intervals to simulate (the policy's, or the list)
    policy: str               # 'young', 'daly', 'fixed', 'list'
    iteration_time_s: float
    tokens_per_iteration: float
    num_gpus: int
    checkpoint_bytes: float
    checkpoint_gb_per_gpu: float
    mtbf_s: float
    young_s: float
    daly_s: float
    optimum_closed_form_s: float
    mean_down_s: float


def setup_from_strategy(strategy, spec: GoodputSpec | None = None, *, days: float | None = None,
                        train_tokens: float | None = None, interval=None, sim=None) -> GoodputSetup:
    """Simulate one iteration of ``strategy`` and build the run model from its ``goodput`` section."""
    from simulator.simulation.strategy import simulate_strategy
    from strategies.goodput_file import parse_interval
    spec = spec if spec is not None else parse_goodput(strategy.raw.get("goodput"))
    if days is not None and train_tokens is not None:
        raise ConfigError("--days and --train-tokens are both given: give one")
    if days is not None:
        if not (days > 0 and math.isfinite(days)):
            raise ConfigError(f"--days = {days!r} must be > 0")
        check_days(days, "--days")
        spec = replace(spec, days=days, train_tokens=None)
    if train_tokens is not None:
        if not train_tokens > 0:
            raise ConfigError(f"--train-tokens = {train_tokens!r} must be > 0")
        spec = replace(spec, train_tokens=train_tokens, days=None)
    if interval is not None:
        spec = replace(spec, checkpoint=replace(spec.checkpoint, interval_s=parse_interval(interval, "--interval")))
    if spec.days is None and spec.train_tokens is None:
        tt = strategy.training.train_tokens
        if tt is None:
            raise ConfigError("the run has no length: set goodput.days or goodput.train_tokens (or "
                              "training.train_tokens), or pass --days D / --train-tokens T")
        spec = replace(spec, train_tokens=tt)
    sim = sim if sim is not None else simulate_strategy(strategy)
    plan = sim.plan
    if spec.cost_per_gpu_hour is None:   # the catalog's price of the GPU (topologies/data/prices.yaml)
        from topologies.pricing import plan_price
        spec = replace(spec, cost_per_gpu_hour=plan_price(plan))
    it = sim.report.makespan_s
    tpi = float(plan.tokens_per_iteration)
    n_gpus = plan.num_gpus
    n_nodes = plan.cluster.nodes
    if spec.train_tokens is not None:
        check_days(spec.train_tokens / (tpi / it) / DAY, f"train_tokens = {spec.train_tokens:.3g} at "
                   f"{tpi / it:.4g} tokens/s: the failure-free run")
    comps = merge_components(spec, n_gpus, n_nodes) + extra_components(spec, n_nodes, it)
    check_failure_counts(comps, spec.days * DAY if spec.days is not None else spec.train_tokens / (tpi / it))
    ck = spec.checkpoint
    total_b, per_gpu_b = checkpoint_bytes(plan)
    write_s = total_b / (ck.storage_gb_per_s * 1e9)
    load_s = total_b / ((ck.load_gb_per_s or ck.storage_gb_per_s) * 1e9)
    if ck.async_save:
        block = per_gpu_b / (ck.snapshot_gb_per_s * 1e9)
        commit = write_s
    else:
        block, commit = write_s, 0.0
    for flag, secs in (("storage_gb_per_s", write_s), ("load_gb_per_s", load_s), ("snapshot_gb_per_s", block)):
        if not secs <= MAX_GOODPUT_DAYS * DAY:
            raise ConfigError(f"goodput.checkpoint.{flag}: a {total_b / 1e9:.4g} GB checkpoint would take {secs:.3g} s, "
                              f"longer than the longest run ({MAX_GOODPUT_DAYS:,} days); give a throughput in GB/s "
                              f"(e.g. 100)")
    cache = {plan.sizes.dp: it}

    def iteration_time(dp: int) -> float:
        if dp not in cache:
            cache[dp] = _elastic_iteration_time(strategy, plan, dp)
        return cache[dp]

    parts = restart_parts(spec, n_gpus)
    restart_s = sum(v for _k, v in parts) if parts else spec.restart_s
    lam = sum(c.rate_per_s for c in comps)
    mtbf = 1.0 / lam if lam > 0 else math.inf
    down = (sum(c.rate_per_s * c.detection_s for c in comps) / lam if lam > 0 else 0.0) + restart_s + load_s
    # asynchronous: the optimum is at least the background write (a shorter interval only waits for
    # it, closed_forms.async_goodput); the first-order optimum is otherwise Young's on the pause
    young = max(young_interval(block, mtbf), commit) if lam > 0 else math.inf
    daly = max(daly_interval(block, mtbf), commit) if lam > 0 else math.inf
    opt = optimal_interval_closed_form(block, down, mtbf, write=commit) if lam > 0 else math.inf
    pol = ck.interval_s
    if pol == "young":
        intervals, policy = (young,), "young"
    elif pol == "daly":
        intervals, policy = (daly,), "daly"
    elif isinstance(pol, tuple):
        intervals, policy = pol, "list"
    else:
        intervals, policy = (float(pol),), "fixed"
    if not all(math.isfinite(t) for t in intervals):
        raise ConfigError("checkpoint.interval_s = young/daly needs failures (all failure rates are 0); give the "
                          "interval in seconds")
    m = RunModel(
        components=comps, full_tokens_per_s=tpi / it, interval_s=float(intervals[0]),
        save_block_s=block, save_commit_s=commit, load_s=load_s, restart_s=restart_s,
        horizon_s=spec.days * DAY if spec.days is not None else None, target_tokens=spec.train_tokens,
        dp=plan.sizes.dp, num_nodes=n_nodes, spare_nodes=spec.spare_nodes, repair_s=spec.repair_hours * HOUR,
        elastic=spec.elastic, iteration_time=iteration_time,
        slow_rate_per_node_hour=spec.slow_nodes.rate_per_node_hour, slowdown=spec.slow_nodes.slowdown,
        slow_detection_s=spec.slow_nodes.detection_hours * HOUR,
        restart_parts=parts, restart_cv=spec.restart.cv, save_failure_p=ck.failure_probability,
        save_slow_p=ck.slow_probability, save_slowdown=ck.slowdown,
        maintenance_every_s=spec.maintenance.every_hours * HOUR,
        maintenance_s=spec.maintenance.duration_hours * HOUR, max_wall_s=MAX_GOODPUT_DAYS * DAY)
    for t in intervals:
        check_run_model(replace(m, interval_s=float(t)))
    return GoodputSetup(m, spec, tuple(float(t) for t in intervals), policy, it, tpi, n_gpus, total_b,
                        per_gpu_b / 1e9, mtbf, young, daly, opt, down)


def check_failure_counts(comps, run_s: float) -> None:
    """Refuse, before any closed form or replay, a failure source whose rate (after the job-size
    scaling) is not finite or whose expected failures over the failure-free run length ``run_s``
    alone exceed ``MAX_GOODPUT_EVENTS`` (each failure is several SimPy events), and a Weibull shape
    under 0.1: time-between-failure fits of HPC and GPU fleets have shapes of 0.5-0.8 (Schroeder and
    Gibson, DSN 2006, Sec. 5.3), and 0.1 already makes the gaps' squared coefficient of variation
    ~1.8e5 (``closed_forms.weibull_cv2``), an event storm."""
    from strategies.limits import MAX_GOODPUT_EVENTS
    for c in comps:
        where = {"domain": f"goodput.domains.{c.name}", "lemon": "goodput.lemons"}.get(
            c.per, "goodput.rollbacks" if c.name == "loss_spike" else f"goodput.failures.{c.name}")
        if not c.shape >= 0.1:
            raise ConfigError(f"{where}.shape = {c.shape!r} is under 0.1: measured failure gaps have Weibull shapes "
                              f"of 0.5-0.8; give a shape >= 0.1 (1 = exponential)")
        n = c.rate_per_s * run_s
        if not n <= MAX_GOODPUT_EVENTS:
            raise ConfigError(f"{where}: {c.rate_per_s * HOUR:.4g} failures per hour (after scaling to the job) is "
                              f"{n:.4g} failures in a {run_s / DAY:.3g}-day run, over the limit of "
                              f"{MAX_GOODPUT_EVENTS:,} events; give a realistic rate (failures per device-hour are "
                              f"~1e-5 to 1e-3) or a smaller size_exponent")


def _elastic_iteration_time(strategy, plan, dp: int) -> float:
    """Iteration time of the same job on ``dp`` data-parallel replicas: same per-replica batch,
    ``nodes * dp / full dp`` nodes, re-simulated (simulator.simulation.strategy.simulate_strategy)."""
    from simulator.simulation.strategy import simulate_strategy
    full = plan.sizes.dp
    gb = strategy.training.global_batch
    if gb % full:
        raise ConfigError(f"elastic: training.global_batch {gb} is not a multiple of dp {full}")
    nodes = plan.cluster.nodes
    if (nodes * dp) % full:
        raise ConfigError(f"elastic: {nodes} nodes over dp {full} is not a whole number of nodes per replica; "
                          f"elastic training drops whole replicas (set goodput.elastic: false)")
    cl = strategy.cluster
    if isinstance(cl, dict) and "nodes" in cl:
        cl = {**cl, "nodes": nodes * dp // full}
    elif isinstance(cl, str):
        cl = {"preset": cl, "nodes": nodes * dp // full}
    else:
        raise ConfigError("elastic: the cluster must be a preset mapping ({preset: NAME, nodes: N}) so the smaller "
                          "job can be re-simulated; set goodput.elastic: false or write the cluster that way")
    s2 = replace(strategy, cluster=cl, parallel=replace(strategy.parallel, dp=dp),
                 training=replace(strategy.training, global_batch=gb // full * dp))
    return simulate_strategy(s2).report.makespan_s
