"""Failure-rate presets from published fleet studies (``topologies/data/failure_fleets.yaml``).

A preset becomes failure components in the schema of ``failure_rates.yaml`` (a mapping name ->
fields). Three forms of published figure are read:

* the default components (Llama 3 report, Table 5; ``components: default``);
* a hardware rate per node-day (Kokolis et al. 2024, Sec. IV: ``r_f``): one component per node,
  the series model of the same paper (a job's rate = nodes x r_f);
* measured job MTTF at several job sizes: what ``1 / MTTF`` has beyond the hardware rate becomes a
  job-level component whose rate grows as ``(gpus / ref_gpus) ** exponent``, the exponent fitted by
  least squares in log-log (:func:`fit_job_level`); a single point gives exponent 1.

:func:`cross_fleet` fits each preset and predicts every other preset's published figures (the error
table of docs/validation.md).

>>> fit_job_level([(8, 100.0), (64, 10.0)], 0.0)
(0.01, 8, 1.107)
"""
from __future__ import annotations

import math

from simulator.goodput.model import FLEETS_FILE, HOUR, RATES_FILE
from strategies.errors import ConfigError

DEFAULT_FLEET = "llama3-405b-h100"
GPUS_PER_NODE = 8  # every preset's fleet: 8-GPU servers (DGX / HGX A100 and H100, Grand Teton)


def load_data(path=FLEETS_FILE) -> dict:
    from strategies.config import load_mapping
    return load_mapping(path, "failure-fleet file")


def load_failure_defaults(path=RATES_FILE) -> dict:
    from strategies.config import load_mapping
    return load_mapping(path, "failure-rate file")["components"]


def fleet_names(data: dict | None = None) -> tuple[str, ...]:
    return tuple((data or load_data())["fleets"])


def fit_job_level(points, hw_per_gpu_hour: float) -> tuple[float, int, float]:
    """(rate per hour at ``ref_gpus``, ``ref_gpus``, exponent) of the job-level source: the rate
    ``1 / mttf - hw x gpus`` at each measured size, a line through ``(ln gpus, ln rate)`` by least
    squares (rounded to 4 significant figures / 3 decimals, as the data are)."""
    pts = sorted((int(g), float(h)) for g, h in points)
    xs, ys = [], []
    for g, h in pts:
        r = 1.0 / h - hw_per_gpu_hour * g
        if not r > 0:
            raise ConfigError(f"job MTTF {h:g} h at {g} GPUs is not shorter than the hardware rate predicts "
                              f"({1 / (hw_per_gpu_hour * g):.4g} h): no job-level failures to fit")
        xs.append(math.log(g))
        ys.append(math.log(r))
    ref = pts[0][0]
    if len(pts) == 1:
        return float(f"{math.exp(ys[0]):.4g}"), ref, 1.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    at_ref = math.exp(my + slope * (math.log(ref) - mx))
    return float(f"{at_ref:.4g}"), ref, round(slope, 3)


def fleet_components(name: str, data: dict | None = None, defaults: dict | None = None) -> dict:
    """The failure components of preset ``name`` (name -> fields, the failure_rates.yaml schema)."""
    data = data or load_data()
    fleets = data["fleets"]
    if name not in fleets:
        from strategies.config import did_you_mean
        raise ConfigError(f"goodput.fleet = {name!r} is not a preset{did_you_mean(name, fleets)}; presets: "
                          f"{', '.join(fleets)} (topologies/data/failure_fleets.yaml)")
    f = fleets[name]
    src = str(f.get("source", ""))
    if f.get("components") == "default":
        return {k: dict(v) for k, v in (defaults or load_failure_defaults()).items()}
    out: dict = {}
    hw = 0.0
    if "node_failures_per_1000_node_days" in f:
        per_node_h = float(f["node_failures_per_1000_node_days"]) / 1000.0 / 24.0
        hw = per_node_h / int(f.get("gpus_per_node", GPUS_PER_NODE))
        out["hardware"] = {"rate_per_device_hour": per_node_h, "per": "node", "detection_s": 60.0,
                           "needs_repair": True, "source": src}
    if "gpu_failures_per_week" in f:
        w = f["gpu_failures_per_week"]
        hw = float(w["count"]) / (int(w["gpus"]) * 168.0)
        out["gpu"] = {"rate_per_device_hour": hw, "per": "gpu", "detection_s": 60.0, "needs_repair": True,
                      "source": src}
    if "job_mttf" in f:
        rate, ref, expo = fit_job_level([(p["gpus"], p["hours"]) for p in f["job_mttf"]], hw)
        out["job_level"] = {"rate_per_hour": rate, "ref_gpus": ref, "size_exponent": expo, "per": "job",
                            "detection_s": 600.0, "needs_repair": False,
                            "source": src + " (job-level part fitted: fleets.fit_job_level)"}
    return out


def component_rate_per_hour(fields: dict, gpus: int, gpus_per_node: int = GPUS_PER_NODE) -> float:
    """Failures per hour of one component (fields of the schema) for a job of ``gpus`` GPUs."""
    per = fields["per"]
    if per == "job":
        rate, expo = float(fields["rate_per_hour"]), float(fields["size_exponent"])
        # in logs: (gpus / ref) ** exponent overflows a float for extreme exponents; a rate over the
        # float range is infinite, which setup.check_failure_counts refuses naming the component
        log_r = math.log(rate) + expo * math.log(gpus / float(fields["ref_gpus"])) if rate > 0 else -math.inf
        return math.exp(log_r) if log_r < 700.0 else math.inf
    count = gpus if per == "gpu" else max(1, math.ceil(gpus / gpus_per_node))
    return float(fields["rate_per_device_hour"]) * count


def predict(components: dict, obs: dict) -> float:
    """A preset's prediction of one published figure (the forms of failure_fleets.yaml's ``observed``)."""
    g = int(obs["gpus"])
    if "mttf_hours" in obs:
        return 1.0 / sum(component_rate_per_hour(c, g) for c in components.values())
    hours = float(obs["days"]) * 24.0
    if "hardware_failures" in obs:
        return hours * sum(component_rate_per_hour(c, g) for c in components.values() if c["needs_repair"])
    return hours * sum(component_rate_per_hour(c, g) for c in components.values())


def cross_fleet(data: dict | None = None) -> list[dict]:
    """Each preset's prediction of every preset's published figures: ``{fit, target, figure, observed,
    predicted, error}`` (error = predicted / observed - 1; rows with fit == target are in-sample)."""
    data = data or load_data()
    rows = []
    for fit in data["fleets"]:
        comps = fleet_components(fit, data)
        for target, f in data["fleets"].items():
            for obs in f.get("observed", ()):
                kind = next(k for k in ("mttf_hours", "hardware_failures", "interruptions") if k in obs)
                want = float(obs[kind])
                got = predict(comps, obs)
                rows.append({"fit": fit, "target": target, "figure": kind, "gpus": int(obs["gpus"]),
                             "days": obs.get("days"), "observed": want, "predicted": got,
                             "error": got / want - 1.0})
    return rows


def rate_per_s(fields: dict, gpus: int) -> float:
    return component_rate_per_hour(fields, gpus) / HOUR
