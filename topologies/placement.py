"""Megatron-style rank placement: which global ranks form each parallel group.

Megatron-LM (``megatron/core/parallel_state.py``, ``RankGenerator`` with the default order
``"tp-cp-ep-dp-pp"``) lays ranks out with tensor parallel fastest, then context parallel, then
data parallel, then pipeline parallel slowest::

    rank = tp_rank + TP * (cp_rank + CP * (dp_rank + DP * pp_rank))

Expert parallelism is a sub-axis of data parallelism: ``RankGenerator`` splits the dp axis into
``(ep, dp // ep)`` with ep fastest ("ordered_size_w_ep"), so ``dp_rank = ep_rank + EP * edp_rank``
and an expert-parallel group is a run of ``EP`` consecutive dp indices. ``edp`` (expert data
parallel, Megatron's "dp modulo ep") is the complementary sub-axis.

With TP <= GPUs per node, the tp group of every rank sits inside one node, which is why Megatron
puts tp fastest. Axis names may be joined with ``-`` (``"dp-cp"`` is Megatron's gradient
all-reduce group with context parallelism, ``"tp-cp"`` ...).

>>> sizes = dict(tp=2, cp=1, dp=2, pp=2)
>>> [rank_of(0, 0, d, p, sizes) for p in range(2) for d in range(2)]
[0, 2, 4, 6]
>>> group_ranks("dp", sizes, 5)
(5, 7)

``order`` lays the axes in another nesting, fastest first: Llama 3's [TP, CP, PP, DP] (Dubey et al.
2024, arXiv:2407.21783, Section 3.3.2: "DP (i.e., FSDP) is the outermost parallelism") is
``("tp", "cp", "pp", "dp")``, so a pipeline is consecutive ranks and a DP group strides the whole job:

>>> llama = ParallelSizes(tp=2, dp=2, pp=2, order=("tp", "cp", "pp", "dp"))
>>> group_ranks("dp", llama, 0), group_ranks("pp", llama, 0)
((0, 4), (0, 2))
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import product
from numbers import Integral
from typing import Any

from strategies.errors import ConfigError
from topologies.gpus import did_you_mean

#: Parallel axes in Megatron order, fastest-varying first (dp expands to ep, edp for experts).
ORDER = ("tp", "cp", "dp", "pp")
#: Axes ``group_ranks`` accepts (alone or joined with ``-``).
AXES = ("tp", "cp", "dp", "pp", "ep", "edp", "etp")
# Internal coordinates, fastest first: the dp axis is split into (ep, edp).
_COORDS = ("tp", "cp", "ep", "edp", "pp")
_AXIS_COORDS = {"tp": ("tp",), "cp": ("cp",), "dp": ("ep", "edp"), "pp": ("pp",), "ep": ("ep",),
                "edp": ("edp",), "etp": ("tp",)}
#: Axes of the expert mesh under MoE parallel folding (``ParallelSizes.etp`` set)
#: ("etp-ep": Megatron's tp_ep group, expert TP x EP, which the allgather token dispatcher gathers over)
_EXPERT_AXES = ("etp", "ep", "edp", "etp-ep")


@dataclass(frozen=True)
class ParallelSizes:
    """Degrees of parallelism for one layout.

    tp: tensor-parallel size (fastest-varying in the rank order).
    cp: context-parallel size.
    dp: data-parallel size (includes the expert-parallel sub-axis).
    pp: pipeline-parallel size (slowest-varying).
    ep: expert-parallel size, a divisor of dp (Megatron carves EP out of DP), unless etp is set.
    etp: expert tensor-parallel size under MoE parallel folding (Megatron-core parallel_state:
        ``expert_decoder_rank_generator = RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1)``; Liu et
        al. 2025, "MoE Parallel Folding", arXiv:2504.14960): the expert layers of a pipeline
        stage lay their own mesh etp x ep x edp (etp fastest) over the stage's tp*cp*dp consecutive
        ranks, so ep may exceed dp; None = experts follow the dense layout (etp = tp, ep inside dp).
    """

    tp: int = 1
    cp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int | None = None
    #: nesting of the axes, fastest-varying first: a permutation of ``ORDER`` (Megatron's, the default)
    order: tuple[str, ...] = ORDER

    def __post_init__(self):
        if isinstance(self.order, str):
            object.__setattr__(self, "order", tuple(self.order.split("-")))
        elif not isinstance(self.order, tuple):
            object.__setattr__(self, "order", tuple(self.order))
        for axis in ("tp", "cp", "dp", "pp", "ep") + (("etp",) if self.etp is not None else ()):
            value = getattr(self, axis)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"parallel size {axis} = {value!r} must be an integer >= 1")
        if tuple(self.order) != ORDER:
            if sorted(self.order) != sorted(ORDER) or len(self.order) != len(ORDER):
                raise ConfigError(f"parallel.order = {'-'.join(map(str, self.order))!r} must name tp, cp, dp and "
                                  f"pp once each, fastest first, e.g. 'tp-cp-pp-dp' (Llama 3) or "
                                  f"'{'-'.join(ORDER)}' (Megatron, the default)")
            if self.ep > 1 or self.etp is not None:
                raise ConfigError(f"parallel.order = {'-'.join(self.order)!r} with ep = {self.ep}"
                                  f"{'' if self.etp is None else f', etp = {self.etp}'}: expert layouts follow "
                                  f"Megatron's order only; drop order or the expert parallelism")
        if self.etp is not None:
            stage = self.tp * self.cp * self.dp
            if stage % (self.etp * self.ep):
                raise ConfigError(
                    f"parallel.etp * ep = {self.etp} * {self.ep} = {self.etp * self.ep} must divide the "
                    f"{stage} GPUs of a pipeline stage (tp*cp*dp = {self.tp}*{self.cp}*{self.dp}; MoE parallel "
                    f"folding lays the expert mesh etp x ep x edp over them); change etp or ep")
        elif self.dp % self.ep:
            raise ConfigError(
                f"parallel size ep = {self.ep} must divide dp = {self.dp} (Megatron carves expert "
                f"parallelism out of data parallelism); pick ep in "
                f"{[d for d in range(1, self.dp + 1) if self.dp % d == 0][:12]}, or set parallel.etp "
                f"(MoE parallel folding: experts over tp*cp*dp)"
            )

    @property
    def world_size(self) -> int:
        """Total ranks: tp * cp * dp * pp."""
        return self.tp * self.cp * self.dp * self.pp

    @property
    def edp(self) -> int:
        """Expert-data-parallel size: dp // ep, or tp*cp*dp // (etp*ep) with parallel folding."""
        if self.etp is not None:
            return self.tp * self.cp * self.dp // (self.etp * self.ep)
        return self.dp // self.ep

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel size of the expert layers: etp, or tp without parallel folding."""
        return self.tp if self.etp is None else self.etp


def as_sizes(sizes: Any) -> ParallelSizes:
    """Normalise a mapping, an object with tp/cp/dp/pp(/ep) attributes, or ParallelSizes."""
    if isinstance(sizes, ParallelSizes):
        return sizes
    if isinstance(sizes, Mapping):
        unknown = [k for k in sizes if k not in ("tp", "cp", "dp", "pp", "ep", "etp", "order")]
        if unknown:
            raise ConfigError(
                f"parallel sizes: unknown axis {unknown[0]!r}{did_you_mean(unknown[0], ORDER + ('ep',))}; "
                f"valid axes are tp, cp, dp, pp, ep"
            )
        return ParallelSizes(**{k: sizes[k] for k in sizes})
    if all(hasattr(sizes, a) for a in ("tp", "dp", "pp")):
        return ParallelSizes(**{a: getattr(sizes, a) for a in ("tp", "cp", "dp", "pp", "ep", "etp", "order")
                                if getattr(sizes, a, None) is not None})
    raise ConfigError(f"parallel sizes {sizes!r}: pass a dict like {{'tp': 2, 'dp': 4, 'pp': 2}} "
                      f"or an object with tp/cp/dp/pp attributes")


def coord_order(s: ParallelSizes) -> tuple[str, ...]:
    """Internal coordinates of ``s``'s rank order, fastest first (dp split into ep, edp)."""
    out: list[str] = []
    for axis in s.order:
        out += ["ep", "edp"] if axis == "dp" else [axis]
    return tuple(out)


def axis_stride(s: ParallelSizes, axis: str) -> int:
    """Rank distance between neighbours along ``axis`` (tp, cp, dp or pp) in ``s``'s order."""
    stride = 1
    for a in s.order:
        if a == axis:
            return stride
        stride *= getattr(s, a)
    raise ConfigError(f"unknown parallel axis {axis!r}; use one of {', '.join(ORDER)}")


def _coord_sizes(s: ParallelSizes) -> dict[str, int]:
    if s.etp is not None:   # folding: the dense layout keeps dp whole; experts use _expert_group
        return {"tp": s.tp, "cp": s.cp, "ep": 1, "edp": s.dp, "pp": s.pp}
    return {"tp": s.tp, "cp": s.cp, "ep": s.ep, "edp": s.edp, "pp": s.pp}


def _expert_group(axis: str, s: ParallelSizes, rank: int) -> tuple[int, ...]:
    """``rank``'s group along an expert axis under parallel folding: within the pipeline stage's
    tp*cp*dp consecutive ranks, local = etp_rank + etp * (ep_rank + ep * edp_rank)."""
    stage = s.tp * s.cp * s.dp
    base, local = rank - rank % stage, rank % stage
    e, ep_r, edp_r = local % s.etp, (local // s.etp) % s.ep, local // (s.etp * s.ep)
    if axis == "etp":
        return tuple(base + x + s.etp * (ep_r + s.ep * edp_r) for x in range(s.etp))
    if axis == "ep":
        return tuple(base + e + s.etp * (x + s.ep * edp_r) for x in range(s.ep))
    if axis == "etp-ep":
        return tuple(base + x + s.etp * s.ep * edp_r for x in range(s.etp * s.ep))
    return tuple(base + e + s.etp * (ep_r + s.ep * x) for x in range(s.edp))


def _check_index(name: str, value: Any, size: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral) or not 0 <= value < size:
        raise ConfigError(f"{name} = {value!r} is out of range for size {size}; use 0..{size - 1}")


def rank_of(tp_rank: int, cp_rank: int, dp_rank: int, pp_rank: int, sizes: Any) -> int:
    """Global rank of the given coordinates: ``tp + TP*(cp + CP*(dp + DP*pp))`` in Megatron's order,
    the strides of ``sizes.order`` otherwise."""
    s = as_sizes(sizes)
    for name, value, size in (("tp_rank", tp_rank, s.tp), ("cp_rank", cp_rank, s.cp),
                              ("dp_rank", dp_rank, s.dp), ("pp_rank", pp_rank, s.pp)):
        _check_index(name, value, size)
    return int(sum(v * axis_stride(s, a) for a, v in (("tp", tp_rank), ("cp", cp_rank), ("dp", dp_rank),
                                                       ("pp", pp_rank))))


def coords_of(rank: int, sizes: Any) -> dict[str, int]:
    """Inverse of :func:`rank_of`: ``{"tp", "cp", "dp", "pp", "ep", "edp"}`` ranks of ``rank``."""
    s = as_sizes(sizes)
    _check_index("rank", rank, s.world_size)
    rank = int(rank)
    c = {}
    for axis in s.order:
        c[axis], rank = rank % getattr(s, axis), rank // getattr(s, axis)
    dp = c["dp"]
    return {"tp": c["tp"], "cp": c["cp"], "dp": dp, "pp": c["pp"], "ep": dp % s.ep, "edp": dp // s.ep}


def _parse_axis(axis: str) -> tuple[str, ...]:
    tokens = str(axis).lower().replace("_", "-").split("-")
    coords: list[str] = []
    for tok in tokens:
        if tok not in _AXIS_COORDS:
            raise ConfigError(
                f"unknown parallel axis {tok!r}{did_you_mean(tok, AXES)}; use one of "
                f"{', '.join(AXES)} or several joined with '-' (e.g. 'dp-cp')"
            )
        for c in _AXIS_COORDS[tok]:
            if c in coords:
                raise ConfigError(f"parallel axis {axis!r} names {tok!r} twice (or ep/edp together with dp)")
            coords.append(c)
    return tuple(coords)


def _rank_from_coords(c: Mapping[str, int], n: Mapping[str, int], coords: tuple[str, ...] = _COORDS) -> int:
    rank, stride = 0, 1
    for name in coords:
        rank += c[name] * stride
        stride *= n[name]
    return rank


def group_ranks(axis: str, sizes: Any, rank: int) -> tuple[int, ...]:
    """Global ranks (ascending) of ``rank``'s group along ``axis``.

    ``axis`` is one of ``AXES`` or several joined by ``-``: the group varies those coordinates
    and holds the others fixed. ``"ep"`` varies the expert-parallel sub-axis of dp, ``"edp"`` the
    expert-data-parallel one (Megatron's ``RankGenerator.get_ranks(..., independent_ep=True)``).
    """
    s = as_sizes(sizes)
    if s.etp is not None and str(axis).lower() in _EXPERT_AXES:
        _check_index("rank", rank, s.world_size)
        return _expert_group(str(axis).lower(), s, int(rank))
    vary = _parse_axis(axis)
    _check_index("rank", rank, s.world_size)
    n = _coord_sizes(s)
    c = coords_of(rank, s)
    base = {k: c[k] for k in _COORDS}
    out = []
    order = coord_order(s)
    for values in product(*(range(n[v]) for v in vary)):
        coords = dict(base)
        coords.update(zip(vary, values))
        out.append(_rank_from_coords(coords, n, order))
    return tuple(sorted(out))


def all_groups(axis: str, sizes: Any) -> list[tuple[int, ...]]:
    """Every group along ``axis`` (each a tuple of ranks), ordered by its smallest rank."""
    s = as_sizes(sizes)
    seen, groups = set(), []
    for r in range(s.world_size):
        if r not in seen:
            g = group_ranks(axis, s, r)
            seen.update(g)
            groups.append(g)
    return groups


def node_counts(cluster: Any, ranks: Iterable[int]) -> dict[int, int]:
    """``{node: GPUs of the group on that node}`` for a group of global ranks on ``cluster``."""
    ranks = list(ranks)
    gpn, total = cluster.gpus_per_node, cluster.nodes * cluster.gpus_per_node
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, Integral) or not 0 <= r < total:
            raise ConfigError(
                f"rank {r!r} is not a GPU of cluster {getattr(cluster, 'name', '?')!r} (ranks 0..{total - 1}); "
                f"the layout needs more GPUs than the cluster has: add nodes or shrink the layout"
            )
    ranks = [int(r) for r in ranks]
    if len(set(ranks)) != len(ranks):
        dup = [r for r, k in Counter(ranks).items() if k > 1]
        raise ConfigError(f"group ranks {ranks!r} repeat rank(s) {dup}; each rank may appear once")
    return dict(sorted(Counter(r // gpn for r in ranks).items()))


def group_span(cluster: Any, ranks: Iterable[int]) -> tuple[int, int]:
    """(nodes the group spans, max GPUs of the group on one node)."""
    counts = node_counts(cluster, ranks)
    if not counts:
        raise ConfigError("group_span: the group is empty; pass at least one rank")
    return len(counts), max(counts.values())


def check_fits(sizes: Any, cluster: Any) -> ParallelSizes:
    """Raise ConfigError unless the layout's world size fits the cluster; return the sizes."""
    s = as_sizes(sizes)
    if s.world_size > cluster.num_gpus:
        raise ConfigError(
            f"layout tp={s.tp} cp={s.cp} dp={s.dp} pp={s.pp} needs {s.world_size} GPUs but cluster "
            f"{cluster.name!r} has {cluster.num_gpus}; use at least "
            f"{-(-s.world_size // cluster.gpus_per_node)} nodes or shrink the layout"
        )
    return s


__all__ = [
    "AXES",
    "ORDER",
    "ParallelSizes",
    "all_groups",
    "as_sizes",
    "axis_stride",
    "check_fits",
    "coord_order",
    "coords_of",
    "group_ranks",
    "group_span",
    "node_counts",
    "rank_of",
]
