"""Size limits: what one run may ask of the machine, checked before the work is done.

Each limit is derived from measured costs on the development machine (one core of a 2-core VM,
CPython 3.11; ``docs/strategy-file.md`` "Limits" lists them with the same reasoning):

* Tasks: lowering + the full engine run about 200,000 tasks/s and hold about 400 bytes per task
  (a 700,000-task pipeline: 3.7 s, 330 MB peak RSS). ``MAX_TASKS`` = 5 M is therefore about 30 s
  and 2 GB, 14x the largest shipped example (GPT-3 175B on 1024 A100s, 346,312 tasks).
* Commands that run several simulations (``compare``, ``plan-recompute``) may build
  ``MAX_TOTAL_TASKS`` = 2 x ``MAX_TASKS`` tasks in all (about a minute; ``compare`` holds every
  run's graph, ~4 GB at the limit).
* Actions: a schedule function emits about 1 M actions/s at about 150 bytes each (``schedules``
  cache comment), and each action lowers to at least one task; ``MAX_ACTIONS`` = 2 M keeps the
  schedule alone under ~2 s and 300 MB.
* Pipeline stages: costing (collective groups per stage), template lowering and the per-rank reports
  do Python work per virtual stage before and beside the task count: about 2 ms per stage (a
  pp 8192, 8192-layer strategy with one microbatch: 16 s for 8,192 stages and 245,769 tasks), so
  ``MAX_STAGES`` = 16,384 (pp * vpp) is about 35 s, 128x the most stages of a published run (Llama 3
  405B: pp 16 x 8 chunks).
* Layers: costing and memory reports do Python work per layer before a task count is known;
  ``MAX_LAYERS`` = 10,000 is 50x the deepest published model we know (Llama 3 405B: 126 layers).
* Search grid: ``execsim search`` visits every point of its grid (closed-form checks, then the static
  memory bound) before simulating: about 0.43 ms per point (GPT-3 175B's default space, 10,854
  points: 4.7 s). ``MAX_GRID_POINTS`` = 600,000 is about 4 minutes, just above the default space over
  the 29 GPU counts of ``--gpus-range 64:4096`` for Llama-3 70B (516,780 points); narrow it with
  ``--axis``. Each axis takes at most ``MAX_AXIS_VALUES`` = 64 values.
* GPUs: cluster placement and collective groups are computed per rank; ``MAX_GPUS`` = 2^20
  (about 1 M GPUs) is 10x the largest published training cluster.
* Sequence length: ``MAX_SEQ_LEN`` = 2^24 tokens (16 M) keeps attention FLOP and byte counts
  (s^2 * h * batch) far inside float64's exact-integer range (2^53) for any allowed width.
* Model widths (hidden, ffn, vocab, heads, experts ...): at most ``MAX_DIM`` = 2^24 (650x GPT-3's
  hidden size), and tokens per microbatch (micro_batch * seq_len) at most 2^26, so that byte
  counts such as s * b * h stay exact 64-bit integers (2^24 * 2^26 = 2^50).
* Goodput (``execsim goodput``): the SimPy replay handles about 150,000 events/s (failures,
  repairs, restarts; a checkpoint cycle is closed form, not events). ``MAX_GOODPUT_EVENTS`` =
  20 M events over all seeds and intervals is about two minutes; the estimate (expected events per
  run x seeds x intervals) is checked before the first seed runs. The horizon is at most
  ``MAX_GOODPUT_DAYS`` = 3,650 days (ten years, 30x Llama 3's 54-day snapshot; a token budget
  counts in failure-free days, and a run that does not reach it stops there, unfinished) and
  ``MAX_GOODPUT_SEEDS`` = 10,000 runs.
* Integers in input files are at most 2^53 (``MAX_INT``), the largest range where a float and an
  integer agree; input documents are at most ``MAX_DOCUMENT_BYTES`` (YAML/JSON) and
  ``MAX_CSV_BYTES`` (schedule and profile CSVs).

Functions here do constant work: they multiply the sizes the user gave and compare.
"""
from __future__ import annotations

from strategies.errors import ConfigError, brief

MAX_TASKS = 5_000_000
MAX_ACTIONS = 2_000_000
#: Tasks a Chrome/Perfetto trace may hold: writing runs at ~50,000 tasks/s and ~250 bytes per task
#: (a 280,000-task pipeline: 6 s, 71 MB), so 10^6 tasks is ~20 s and 250 MB, about what the
#: Perfetto UI loads comfortably in a browser tab.
MAX_TRACE_TASKS = 1_000_000
MAX_LAYERS = 10_000
MAX_STAGES = 2 ** 14
MAX_GRID_POINTS = 600_000
MAX_AXIS_VALUES = 64
MAX_GPUS = 2 ** 20
MAX_SEQ_LEN = 2 ** 24
MAX_DIM = 2 ** 24
MAX_TOKENS_PER_MICROBATCH = 2 ** 26
MAX_INT = 2 ** 53
MAX_DOCUMENT_BYTES = 8 * 2 ** 20
MAX_CSV_BYTES = 64 * 2 ** 20
#: a PyTorch profiler trace of one rank (decompressed). Parsed whole by ``json``: the densest trace
#: (40-byte events) needs ~11 bytes of memory per byte of JSON and ~0.18 s per MB (a 50 MB one: 560 MB,
#: 8.8 s on the project machine), so 128 MiB is ~1.5 GB and ~25 s, inside the 3 GB a command may use
#: (512 MiB needed > 4 GB); a few steps of a large model are ~100 MB: trace fewer steps if over.
MAX_TRACE_BYTES = 128 * 2 ** 20
#: trace files one ``execsim calibrate`` reads (one per rank), and their bytes in all (on disk,
#: checked before the first is read: the kernels of every rank are kept, and the reading time adds up)
MAX_TRACE_FILES = 1024
MAX_TRACE_TOTAL_BYTES = 256 * 2 ** 20


def check_actions(pp: int, vpp: int, microbatches: int, where: str = "schedule") -> None:
    """Refuse a schedule of more than ``MAX_ACTIONS`` actions before generating it.

    A schedule has at most 3 actions per (stage, microbatch) (F, I, W; F and B otherwise).

    >>> check_actions(4, 1, 10_000_000)
    Traceback (most recent call last):
    ...
    strategies.errors.ConfigError: schedule: pp*vpp*microbatches = 4*1*10000000 = 40000000 stage-microbatch pairs (up to 3 actions each) exceeds the limit of 666,666 (2,000,000 actions); use fewer microbatches (a larger micro_batch) or fewer stages
    """
    pairs = pp * vpp * microbatches
    if pairs * 3 > MAX_ACTIONS:
        raise ConfigError(f"{where}: pp*vpp*microbatches = {brief(pp)}*{brief(vpp)}*{brief(microbatches)} = "
                          f"{brief(pairs)} stage-microbatch pairs "
                          f"(up to 3 actions each) exceeds the limit of {MAX_ACTIONS // 3:,} ({MAX_ACTIONS:,} "
                          f"actions); use fewer microbatches (a larger micro_batch) or fewer stages")


MAX_GOODPUT_DAYS = 3650
MAX_GOODPUT_SEEDS = 10_000
MAX_GOODPUT_EVENTS = 20_000_000
#: measured events per second of the goodput replay (one core, CPython 3.11): the time in the error
GOODPUT_EVENTS_PER_S = 150_000


def check_goodput_events(seeds: int, intervals: int, per_run: float) -> None:
    """Refuse a goodput run whose expected SimPy events exceed ``MAX_GOODPUT_EVENTS`` (before running).

    >>> check_goodput_events(20, 12, 2e5)
    Traceback (most recent call last):
    ...
    strategies.errors.ConfigError: goodput: seeds x intervals x expected events per run = 20 x 12 x 200,000 = 48,000,000 events exceeds the limit of 20,000,000 (about 320 s); use fewer seeds (--seeds), one interval (--no-sweep), a shorter run (--days) or fewer failure sources
    """
    total = seeds * intervals * per_run
    if total > MAX_GOODPUT_EVENTS:
        raise ConfigError(f"goodput: seeds x intervals x expected events per run = {seeds:,} x {intervals:,} x "
                          f"{per_run:,.0f} = {total:,.0f} events exceeds the limit of {MAX_GOODPUT_EVENTS:,} (about "
                          f"{total / GOODPUT_EVENTS_PER_S:,.0f} s); use fewer seeds (--seeds), one interval "
                          f"(--no-sweep), a shorter run (--days) or fewer failure sources")


def check_stages(pp: int, vpp: int, where: str = "parallel") -> None:
    """Refuse more than ``MAX_STAGES`` virtual stages (pp * vpp) before any per-stage work.

    >>> check_stages(8192, 4)
    Traceback (most recent call last):
    ...
    strategies.errors.ConfigError: parallel: pp*vpp = 8192*4 = 32768 pipeline stages is over the limit of 16,384 (each costs about 2 ms of set-up; docs/strategy-file.md, Limits); use fewer pipeline stages
    """
    if pp * vpp > MAX_STAGES:
        raise ConfigError(f"{where}: pp*vpp = {brief(pp)}*{brief(vpp)} = {brief(pp * vpp)} pipeline stages is over the "
                          f"limit of {MAX_STAGES:,} (each costs about 2 ms of set-up; docs/strategy-file.md, Limits); "
                          f"use fewer pipeline stages")


#: Tasks a command that runs several simulations (compare, plan-recompute) may build in all: about
#: a minute; ``compare`` keeps every run's graph for its table and plot (~4 GB at this limit).
MAX_TOTAL_TASKS = 2 * MAX_TASKS


def check_tasks(estimate: int, what: str, limit: int = MAX_TASKS) -> None:
    """Refuse a run whose estimated task count exceeds ``limit`` (before building it)."""
    if estimate > limit:
        raise ConfigError(f"{what} would build about {estimate:,} tasks, over the limit of {limit:,} (about "
                          f"{30 * limit // MAX_TASKS} s); use fewer microbatches (larger micro_batch), fewer layers per "
                          f"stage, or options.fidelity: coarse (one task per chunk and pass)")
