"""Tunable constants of delta mode (the package doc, :mod:`simulator.engine.delta`, explains each
rule). Every reader takes them at call time as ``params.NAME`` (never ``from ... import NAME``), so
setting one on this module (a test, a benchmark) changes the simulators that run after it."""

#: A sweep that gives up hands the tasks after its sweep point to the engine (DeltaSimulator._resume)
#: when they are at most this share of the live tasks, else runs the engine on everything: the
#: resumed engine costs about 1.4x a full run's per-task time (sub-graph, state patching), so it
#: breaks even near 80 % (measured on the 103,496-task pipeline of python -m benchmarks.delta: 82 %
#: of the tasks resumed at 0.97x of a full run, 89 % at 0.89x, the plain fallback at 0.93x). Below
#: it the resume is also skipped when its cost model expects more than a full run; 1.0: always resume
#: (tests).
RESUME_MAX_SHARE = 0.75
#: Ski rental between the sweep and the resumed engine: the sweep gives up once it has cost this share
#: of the engine's expected time on the tasks after the current sweep point (the cost model
#: ``CostModel.resume_s``: a fixed part + a part per task, measured as changes run), so a change costs at most
#: about (1 + RESUME_RACE) x the resumed engine, and a small change is never handed to it.
RESUME_RACE = 0.3
#: Ski rental against a full run: the sweep gives up once what it has cost plus the expected cost of
#: the alternative (the resumed engine, or a full run) reaches (1 + FALLBACK_WASTE) full runs of the
#: same engine, so a change early in the timeline that re-times most of what follows it wastes at most
#: this share of a full run. Measured on the real GPT-3 graph with the compiled sweep (python -m
#: benchmarks.delta, docs/changelog-performance.md): 0.05 made a change that re-times 0.44 % fall back (0.77x
#: of a compiled full run instead of 12x: the sweep's rate, projected on every task after its point,
#: cannot tell it early from a change that re-times everything); 0.3 let the worst changes cost 0.64x;
#: 0.15 keeps every change up to ~1 % in the sweep.
FALLBACK_WASTE = 0.15
#: The compiled sweep's pace rule (DeltaSimulator._delta, package doc "Fallback"): once its sweep point
#: has passed at least this many tasks in key order, the time it took, scaled to the tasks after the
#: point, predicts the rest of the sweep (a change that re-times every task it passes is as slow per
#: passed task as per re-timed one; one that re-times a few of them is fast). A prediction above
#: PACE_ABORT x the alternative's cost (resumed engine or full run) gives up at once: on the real GPT-3
#: graph a change that re-times everything was recognized after ~400 tasks (0.2 ms) instead of after
#: FALLBACK_WASTE of a full run (python -m benchmarks.delta). 256: the first check (after 256 units of
#: work) decides.
PACE_MIN_SWEPT = 256
#: The threshold of the pace rule, as a multiple of the alternative's expected cost: 1, give up when
#: the prediction says the alternative is cheaper. Measured on the GPT-3 graph (benchmarks/delta.py;
#: prediction / alternative at the first check): 0.26-0.63 for a change that re-times 0.44 % of the
#: tasks over half the timeline, 0.87 for one that re-times 0.09 %, 1.7-2 for one that re-times 5 %
#: (its density rises from 6 % to 58 % of the tasks passed), 2-7 for 15 %, 8-40 for all. 0.5 sent the
#: first two to the alternative (12-20x became 1.05x and 1.3x of a compiled full run).
PACE_ABORT = 1.0
#: The same threshold for the Python sweep (pace against the Python engine's resume or full run). The
#: Python sweep costs ~8x the Python engine per re-timed task (4-5 us against ~0.55 us), so a change
#: that re-times every task it passes predicts ~8x its alternative or more, and the pace of the first
#: tasks overstates a change whose density falls later. Measured on the GPT-3 graph (benchmarks/delta.py,
#: --kernels python; prediction / alternative at the first check): ~3 for the ~5 % drawn change (its
#: sweep alone is 2-2.5x faster than the resume it was handed to), ~3 for the 0.44 % tail change, 25-29
#: for the first-task changes. At 1 both small ones went to the resume (1.5-1.7x a full run instead of
#: 2.1x and 27x).
PACE_ABORT_PYTHON = 6.0
#: The pace rule (either threshold) applies only when the alternative costs at least this share of a
#: full run: against a cheap resume the RESUME_RACE rule bounds the waste already, and the pace of a change's first tasks overstates
#: what one that stays small costs (a change re-timing 0.09 % looked 4x slower than a resume of 6 %
#: of the graph after its first 1,000 tasks).
PACE_MIN_ALT = 0.2
#: While its pace predicts less than the alternative, the compiled sweep goes on past FALLBACK_WASTE,
#: as long as what it has cost plus the alternative stays within (1 + PACE_WASTE) full runs: the bound
#: on what a change whose pace slows down late (it re-times densely only after a while) can waste.
PACE_WASTE = 0.5
#: Duration changes first try the static re-sweep (``static.StaticResweep``, package doc "Static
#: re-sweep"): re-time the changed tasks in the old key order with every device's old order, checked
#: against Lemma 1 as it goes; on the real GPT-3 graph no drawn change reordered a device (80 of 80,
#: benchmarks/delta.py), on graphs whose device orders do change the try stops at the first pair out
#: of order and backs off. False: never (tests of the ordinary sweep's paths).
STATIC_RESWEEP = True
#: The static re-sweep gives up (state put back, the ordinary sweep and its fallbacks follow) once it
#: has cost this share of a full run of the same engine: it re-times a task for about one engine pop,
#: so a try that has not finished by then cannot beat the full run.
STATIC_BUDGET = 1.0
#: The static re-sweep first takes the changed tasks from a heap (a push and a pop each); after this
#: many (then at every doubling) it compares them with the tasks its point has passed in key order.
STATIC_DENSE_CHECK = 2048
#: ... and when they are at least this share, it re-times every task after its point in the old key
#: order instead, without heap or marks (the change re-times densely: skipping the few clean tasks
#: costs more than re-timing them).
STATIC_DENSE = 0.5
#: The Python static re-sweep (heap only) costs several Python engine pops per re-timed task (~1.5 us
#: against ~0.55 us), so it gives up, like the Python sweep's pace rule, when its pace (time per task
#: its point has passed, times the tasks after it) predicts more than a multiple of the cheaper
#: alternative (resumed engine or full run): STATIC_PACE_PYTHON_LATE at every check (256, 512, ...
#: tasks), STATIC_PACE_PYTHON at the check after STATIC_JUDGE_PYTHON tasks. Measured on the GPT-3
#: graph (benchmarks/delta.py, prediction / alternative at the checks after 256, 512, 1,024, 2,048,
#: 4,096 tasks): 0.37, 0.58, 0.78, 0.95, 1.07 for the ~5 % drawn change (static re-sweep 27 ms, its
#: alternative 145 ms), 0.64, 1.04, 1.17, 1.3, 1.46 for the ~20 % one (80 ms; a resume of 55 k tasks
#: 48 ms), 4.3-5.2 for the first-task change.
STATIC_PACE_PYTHON = 1.1
STATIC_PACE_PYTHON_LATE = 1.5
STATIC_JUDGE_PYTHON = 1024
#: ... and gives up once it has cost this share of a (Python) full run: its successes on the GPT-3
#: graph took 0.15-0.45 of one; a try that goes on longer would waste more than it can gain.
STATIC_BUDGET_PYTHON = 0.5
#: The sweep a DeltaSimulator uses when its ``kernel`` argument is None (see DeltaSimulator).
DEFAULT_KERNEL = "auto"
#: From this many tasks on, the Python sweep's bookkeeping after the loop runs as numpy passes instead
#: of Python loops: the guarded check of the re-timed tasks' edges (``sweep.first_backward_edge``, one
#: pass per edge direction over the CSR arrays) and the count and clearing of the dirtied tasks' scratch
#: (on the ~5 % drawn GPT-3 change: ~6 ms of Python loops over 18-36 k tasks; 0 in tests: always).
VECTOR_MIN = 1024
#: ``budget="auto"`` (the default): either sweep may take up to one full run's time, and at each check it
#: goes on only while, at the rate measured so far, re-timing every task after its point would still
#: cost no more than the alternative (the resumed engine, or a full run), or while its pace (above)
#: predicts less than PACE_ABORT(_PYTHON) x the alternative, within PACE_WASTE. The compiled sweep
#: re-times a task in about the engine's time per task (0.12-0.6 us against 0.3 us, measured by
#: benchmarks/delta.py); the Python sweep costs ~8x the Python engine per re-timed task, and until this
#: round got a fixed 5 % of a full run (ski rental), which handed a change re-timing 5 % of the GPT-3
#: graph over half its timeline to a resume of 46 % of the tasks (1.5x a full run; its sweep alone 2.1x).
AUTO_BUDGET_PYTHON = 1.0
AUTO_BUDGET_COMPILED = 1.0

QUEUE_CHUNK = 256  # entries per chunk of a device queue (split at 2x): bounded memmoves on insert/delete
