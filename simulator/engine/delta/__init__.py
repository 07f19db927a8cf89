"""Delta simulation: re-simulate only the tasks whose timing changes after a local change.

Reference: Jia et al. 2019, "Beyond Data and Model Parallelism for Deep Neural Networks" (FlexFlow),
Section 5.3 "Delta Simulation Algorithm": a strategy search evaluates thousands of candidates that
differ from the previous one in a single operator; instead of simulating the whole task graph again,
start from the previous timeline and propagate the change through the tasks whose ready / start / end
times actually change. This package implements that idea *exactly* for the FIFO engine of
:mod:`simulator.engine.core` (results are bit-identical to a full run, including per-device order and the
global pop order), and handles the part the paper leaves implicit: a change of ready times reorders the
FIFO queue of a device.

Engine semantics (simulator/engine/core.py, FlexFlow Section 5.2)
------------------------------------------------------------
A heap of tasks whose predecessors have all finished, keyed ``key(x) = (R(x), x)``; pop the smallest;
``S(x) = max(R(x), free[dev(x)])``, ``E(x) = S(x) + dur(x)``, ``free[dev(x)] = E(x)``; a successor's
ready time ``R(v) = max(0, max over predecessors E(u))``; it is pushed when its last predecessor pops.

The model the delta works on, and why it equals the engine
----------------------------------------------------------
Model equations, with ``prev(x)`` the task just before ``x`` in the *key-sorted* list of its device::

    R(x) = max(0, max_{u in pred(x)} E(u))
    S(x) = max(R(x), E(prev(x)))            (0 when x is first on its device)
    E(x) = S(x) + dur(x)

Call a timeline *canonical* when every edge ``u -> v`` goes forward in key order,
``key(u) < key(v)`` (then the key-sorted order of all tasks is a topological order).

Lemma 1 (model = engine). Let (R, S, E) satisfy the model equations and be canonical; let pi be all
tasks sorted by key. Then the engine pops exactly pi and produces exactly (R, S, E).
Proof by induction over pops: suppose the engine popped pi_1..pi_k with these values. Every task in its
heap has all predecessors among pi_1..pi_k, so its heap key is (R, id) with the model's R. pi_{k+1}
is in the heap (canonical: its predecessors come earlier in pi), and every other heap entry is some
pi_j with j > k+1, hence a larger key: the engine pops pi_{k+1}. Its ``free[dev]`` is the end of the last
popped task on that device, i.e. ``E(prev(pi_{k+1}))``: start and end agree. QED. (The engine's result
is unique, so a canonical fixed point of the model is unique too.)

Lemma 2 (when it is canonical). With every duration > 0 each edge has ``R(v) >= E(u) > R(u)``:
always canonical. With zero durations an edge can tie (``R(u) == R(v)``, u a zero-duration task
that did not wait) and then goes backwards iff ``v < u``; the engine then pops v after u although
its key is smaller, i.e. the pop order is not key-sorted (this is the "explicit rule" the notes in
shared/notes/engine-measurements.md ask for). Such timelines are *non-canonical*; delta mode detects
them (see below) and falls back to a full run, counted in
:class:`~simulator.engine.delta.stats.DeltaStats` with the reason.
Conversely the engine's pop order is key-sorted iff its timeline is canonical.
"Duration > 0" must hold *after rounding*: ``E(u) > R(u)`` needs ``S(u) + dur(u) > S(u)`` in IEEE
doubles, and a positive duration below half an ulp of the start time (``2.0 + 1e-16 == 2.0``) is lost
and acts as a zero duration. Such a task is *lossy*; the state records whether the last full run had
one (``end == start`` with ``dur > 0``), and a lossy timeline is handled exactly like one with zero
durations (canonical check, guarded sweep). An unguarded sweep that would make a task lossy aborts to a
full run (reason "positive duration lost to rounding"), so the unguarded argument below, which needs
``E > S`` for every task, is never applied to a lossy task.

Delta algorithm (a sweep in key order over the dirty tasks only)
----------------------------------------------------------------
State: R, S, E per task (:class:`~simulator.engine.delta.state.DeltaState`: ``ready_time``,
``start_time``, ``end_time``, with the queue keys and the sweep's scratch); per device a queue of the device's tasks sorted by key (chunked parallel
lists of ready times and ids, searched with ``bisect``); successor and predecessor lists.
A change marks *dirty* the tasks whose inputs changed (its own duration / device / predecessor set,
the task after a removed or inserted list entry). Then a heap of events is processed in increasing
key order; the current event key is the *sweep point* K. Invariant (INV): every list entry with key
< K is final (its values and position equal the new fixed point), and every task whose new key is < K
is in its list at that key. Events for a dirty task x:

* process at ``(nr(x), x)`` where ``nr(x) = max(0, E of predecessors)`` is known (no predecessor is
  *unresolved*, below): put x's list entry at its new key / device if needed, ``prev`` = the entry
  just below, compute S and E. If E changed, the successors' ready times are updated incrementally
  (they become dirty only if their ready time really changes); if the entry moved or E changed, the
  next entry of the list becomes dirty (its ``prev`` or ``E(prev)`` changed). Otherwise nothing
  propagates: early termination.
* *move*: when a predecessor's new end gives x a new ready time (and no predecessor is unresolved),
  x's entry moves at once to its new key, which is > K; the entries after its old and its new place
  become dirty. If the new key is not below x's current end, x's successors could be reached by the
  sweep before x, so x becomes *unresolved*: each successor gets a pending count and cannot be
  processed (nor passed as clean) until x is.
* *vacate* at x's old list key, if the sweep reaches it while x is dirty but cannot be processed
  there (some predecessor is unresolved, or its ready time is known to move but it was not moved):
  x's entry leaves the list (so tasks behind it no longer see a stale end; the next entry becomes
  dirty), and x becomes unresolved. This keeps INV when a task moves *later* past other tasks of its
  device: the engine would not have x in its heap yet, and neither has the sweep.
* New tasks start unresolved.

Why INV holds with durations > 0: every event pushed while processing the event at K has a key > K
(successors: ``R >= E(x) > R(x)``; list neighbours: after the entry at K), a dirty task's list entry is
always >= K, and a provisional ``nr(y)`` computed from a predecessor p that is dirty but not yet
resolved is ``>= E_old(p) > key_old(p)``, so the sweep meets p's old entry (and vacates or processes
p) before it could process y. A moved entry sits at y's provisional key ``(nr(y), y) > K``: nothing
below it changes, nothing above it is processed before y, and if ``nr(y)`` changes again (a
predecessor processed at some K' < nr(y)) it moves again before the sweep gets there. Its successors
have keys ``>= (E(y), .)`` (their ready time includes y's current end), so y comes first when
``nr(y) < E(y)``; otherwise they pend on y. Hence each dirty task is processed once, with final
inputs, and at the end every task satisfies the model equations (a task never marked dirty had no
input change). The result is canonical (Lemma 2), so by Lemma 1 it equals the engine.
Work: the dirty tasks (ready, start or end changed, or moved in a device queue) and their direct
successors / list neighbours, each O(log n + degree + chunk memmove) -- not the suffix after the change.

With zero durations the same sweep runs with guards: a pop below the previous sweep point, or an input
change of an already processed task, aborts to a full run; at the end, edges at tasks whose ready
time changed (and new edges) are checked to go forward in key order (the timeline before the change
was canonical, so other edges still do). If no guard fired, the result is a canonical fixed point and
equals the engine by Lemma 1; otherwise the full run is used (counted).

Zero durations and the resume
-----------------------------
A guarded sweep that stops for its budget or work limit also hands the rest to the engine (below),
after checking what the unguarded argument gives for free. Let F be the entries with a key up to the
sweep point K. The engine pops exactly F first, with the sweep's values, if (a) no task still dirty
has an entry in F (its event would have fallen behind the sweep), (b) no edge goes from a resumed task
into F, (c) every resumed task's new key is after every key in F, and (d) no edge at a task the sweep
processed goes backwards in key order between tasks of F: then each task of F has its predecessors
and its device predecessor in F, computed once with their final values (the guards), F is canonical,
and by the induction of Lemma 1 the engine's heap holds no key below the next task of F until F is
exhausted. The engine's state at that point is what the resume hands over, so the resumed run is the
engine's continuation whatever its order; (e) the resumed tasks popped in key order keeps the new
timeline canonical for the next change. (a) and (d) are checked before the resume
(``_guarded_prefix_ok``), (b), (c) and (e) after the resumed run; if one fails the plain full run is
used. Without (a) some resumes are wrong (tests/test_delta.py keeps one such graph, found by a
15,000-change campaign).

Fallback (cheaper when the change touches much of the graph): the change is applied and the sweep
runs with a time budget, ``budget`` times a full run (the fastest full run so far: engine + state
rebuild; checked every 32 events; one event costs several engine pops, so only a sweep
that stays small can win). The sweep cannot know in advance how far a change will spread, so this is
the ski-rental rule: at most ``budget`` of a full run is wasted. Whatever the budget, the sweep also
gives up once what it has cost plus the expected cost of the alternative (the resumed engine or a full
run, whichever the cost model expects to be cheaper) reaches ``1 + params.FALLBACK_WASTE`` full runs.
With the default budget (``"auto"``) either sweep also watches its *pace* when the alternative is
costly (at least ``params.PACE_MIN_ALT`` of a full run): once its sweep point has passed
``params.PACE_MIN_SWEPT`` tasks in key order, the time so far scaled to the tasks after the point
predicts the rest; above ``params.PACE_ABORT`` (compiled sweep) or ``params.PACE_ABORT_PYTHON`` (Python
sweep, ~8x slower per re-timed task than its engine) x the alternative it gives up at once (a change
that re-times everything is recognized after a few hundred tasks instead of after ``FALLBACK_WASTE``
of a full run), below it goes on, within ``1 + params.PACE_WASTE`` full runs in all. The rule only
chooses between exact paths.
Full runs and resumes run the engine of the sweep's kind: the compiled engine with the compiled sweep
(``kernels_numba.full_run``: the engine loop records each device's pop order and checks canonicity as
tasks pop, then one sequential pass copies the times into the state in place, checks lossy durations,
counts the changed tasks and completes the linked-list queues; the ``DeviceQueue`` objects are rebuilt
from those lists only when a Python path needs them), the Python engine with the Python sweep. When the budget runs out, when the
timeline is not canonical, or when a guard fires, :func:`simulator.engine.core.simulate_arrays` runs on
the current graph (tombstones enter it as isolated
zero-duration tasks: such a task pops at (0, id), starts and ends at its device's current free time
and leaves it unchanged, so it affects no other task), and the delta state is rebuilt from its
arrays with buffer copies; device queues are rebuilt lazily, per device, on first use.
Every fallback is reported in :class:`~simulator.engine.delta.stats.DeltaStats` (``fallback``,
``reason``).
When the sweep stops for its budget or work limit with durations > 0, the fallback does not start
over: the tasks up to the sweep point are final (INV) and are exactly those the engine would have
popped by then (Lemma 1), so the engine resumes from there on the remaining tasks
(:meth:`~simulator.engine.delta.resume.ResumeMixin._resume`, counted in ``DeltaStats.resumed``) unless
they are more than ``params.RESUME_MAX_SHARE`` of the graph. The resume costs about one engine pop per
remaining task plus a fixed part (it patches the state in place), against several pops per task for the
sweep, so with durations > 0 the sweep also races the resume (ski rental, a measured cost model): at its
deadline checks it counts the tasks after its point (one vectorized pass), estimates the resumed
engine's time on them (:meth:`~simulator.engine.delta.cost.CostModel.resume_s`, a fixed part plus a part
per task, seeded from the full run and refined from every resume,
:meth:`~simulator.engine.delta.cost.CostModel.learn_resume`; the compiled resume is
learned whole, its set-up included, the Python one from its engine call on), and hands over once it has
itself cost ``params.RESUME_RACE`` of that estimate. A change late in the timeline then costs at most
about (1 + RESUME_RACE) x the engine on what follows it, while a change that re-times few tasks finishes
in the sweep. The budget still bounds the sweep when the resume is not an option (zero or lossy
durations, or most of the graph after the sweep point).

Compiled sweep
--------------
With numba installed (extra ``fast``) and ``kernel="auto"`` (the default), duration and device changes
run :func:`simulator.engine.delta.kernels_numba.sweep` (with the guards above when the timeline has
zero or rounding-lossy durations, as real lowered graphs do): the same event loop,
device queues as doubly linked lists in key order instead of chunked lists, the event heap as two
arrays. It pauses every 256-1,024 units of work so that the deadline checks and the race above run here
unchanged. Resumes patch the linked lists (:func:`simulator.engine.delta.kernels_numba.last_upto`,
:func:`~simulator.engine.delta.kernels_numba.cut_and_append`); a change that takes the Python path
(task replacements) first rebuilds the ``DeviceQueue`` objects from them
(:meth:`~simulator.engine.delta.device_queues.DeviceQueueSet.as_objects`), and the next compiled sweep
rebuilds the lists (:meth:`~simulator.engine.delta.device_queues.DeviceQueueSet.as_links`). With the
default budget a task replacement skips that path when more than ``params.RESUME_MAX_SHARE`` of the
tasks come after the earliest key it touches, or the resume's cost model expects more than a full run
on them (an up-front count, ``DeltaSimulator._replacement_runs_in_full``): the full run is then the
only alternative, and the Python sweep (~4.5 us per re-timed task against ~0.05 us for the compiled
engine, behind ~1-1.5 ms of set-up) gave up at its first check anyway; the compiled full run starts at
once. Full runs and
resumes run the compiled engine. The event heap is sized once per sweep from a bound on its pushes
(:func:`simulator.engine.delta.kernels_numba.heap_capacity`), so the loop never reallocates and never
returns arrays (reference counting on every push had cost 60 % of its time). The compiled sweep re-times
a task in about the engine's time per task, so the ski rental above is relaxed for it
(``budget="auto"``, :data:`~simulator.engine.delta.params.AUTO_BUDGET_COMPILED`): at each check it goes
on while, at the rate measured so far, re-timing every task after its point would cost no more than the
alternative, up to one full run's time in all. The Python sweep has the same rule with its own pace
threshold (:data:`~simulator.engine.delta.params.AUTO_BUDGET_PYTHON`, ``PACE_ABORT_PYTHON``); until
issue 30's round 4 it had a fixed 5 % of a full run.

Static re-sweep
---------------
On real lowered graphs a device's order is mostly fixed by the schedule (program-order edges per
stream): on the GPT-3 175B graph of benchmarks/delta.py no drawn duration change reorders any device
(80 of 80). Duration changes therefore first try the static re-sweep
(:mod:`~simulator.engine.delta.static`, compiled: :mod:`~simulator.engine.delta.kernels_static`): the
model equations evaluated with every device's *old* order, the tasks whose inputs changed taken in
the *old* key order (a topological order of the edges and of the old device orders, since the old
timeline was canonical), so each has its final inputs when it is computed, and no queue entry moves.
The result is the engine's by Lemma 1 when (i) every device's tasks are still in key order under the
new keys (then the old device predecessor is the model's ``prev``) and (ii) the new timeline is
canonical. Both are checked as the loop goes: (i) at each re-timed task against its device
predecessor (final: earlier in the old key order) and, when nothing propagates to its device
successor, against that one too (a successor re-timed later checks the pair itself); (ii) is free with
durations > 0 that are not lost to rounding (Lemma 2; a lost one stops the loop without the guard),
and with zero or lossy durations every edge into a re-timed task is checked (only a predecessor
ending at the new ready time can tie), and the edges out of one whose end did not change. The first
pair out of order stops the loop; every value written is put back from a log and the ordinary sweep
runs on the untouched state (counted by ``DeltaStats.static`` False; after a refusal the next 1, 3,
7, ... up to 63 changes skip the try). The loop takes the tasks from a heap; once it has re-timed
``params.STATIC_DENSE_CHECK`` tasks and they are at least ``params.STATIC_DENSE`` of the tasks its
point has passed, it re-times *every* task from the change's position on, walking a topological order
of the edges and the device orders (the key order when it was last taken; it stays one while only
static re-sweeps run, since they move no queue entry): no heap, no marks, the same checks, and when
that order is the key order before the change the walk also checks whether it stays sorted under the
new keys (then ``result()`` has nothing to merge). Re-timing a task that did not change gives the
same bits (same inputs, same operations), so walking clean tasks is harmless. A time limit
(``params.STATIC_BUDGET`` x a full run) puts the state back too.
Without numba the same loop runs in Python (``StaticResweep.resweep_py``, the heap only: a Python step per task
is no cheaper than the Python engine's, so there is no dense walk), on device lists built once per
full run (``StaticResweep.py_links``; ~6 ms on 346 k tasks, so a change with more than ``RESUME_MAX_SHARE`` of the
tasks after it does not build them), with a pace rule like the Python sweep's
(``params.STATIC_PACE_PYTHON``): it costs ~1.5 us per re-timed task where the Python sweep costs
~4.5 us (one heap event and no queue operation per task, against two of each when every task
after a lengthened one moves), so a change that re-times a few per cent of the graph over half its
timeline stays in it instead of being handed to the resumed engine.

Results
-------
:meth:`~simulator.engine.delta.simulator.DeltaSimulator.result` costs what changed plus copies: the
global key order (the engine's pop order on a canonical timeline) is kept from the last full run and
patched with the tasks whose key changed since (each sweep and resume records them;
``kernels_numba.merge_order`` merges them in one pass, numpy without numba), and sorted from scratch
only after a task replacement; the times are copied out (views over the compact numbering only when
there are tombstones, which need the renumbering).

Task ids
--------
Ids are stable across changes.
:meth:`~simulator.engine.delta.simulator.DeltaSimulator.replace_tasks` reuses the removed ids
(ascending) for the first new tasks and appends ids for the rest; a removed id that is not reused is a
*tombstone*: it has no device entry and no edges, and NaN times in :attr:`start` & co. (A tombstone is
not a zero-duration task on a virtual device: that would still take part in the FIFO tie-breaks and
in the edges.) :meth:`~simulator.engine.delta.simulator.DeltaSimulator.result` and
:meth:`~simulator.engine.delta.simulator.DeltaSimulator.graph_arrays` renumber the live tasks densely,
keeping their relative order, so ties break the same way and ``result()`` equals
``simulate_arrays(*graph_arrays())``; with no tombstones the two numberings coincide.

Layout
------
This ``__init__`` holds this doc only: import the modules by name. :class:`DeltaSimulator` holds
collaborators for the jobs that own their data (the Python sweep ``_python_sweep``, the compiled
sweep's driver ``_compiled``, the static re-sweep ``_static``, the device queues, the costs, the
state) and hands them what they read explicitly -- the graph's arrays as a ``KernelGraph`` (compiled
kernels) or a ``ListGraph`` (Python loops), the makespan, the change's start -- and records what they
return; the fallback / resume is still a mixin (``ResumeMixin``) that reads the simulator's
attributes. Imports run one way (``simulator`` imports the other modules, they import ``queues``,
``stats``, ``state``, ``cost``, ``device_queues`` and ``params``, never ``simulator``). The per-task
arrays every module reads are one :class:`~simulator.engine.delta.state.DeltaState` (``self._state``),
named for what they hold; the other attributes the modules share are listed by job in
``DeltaSimulator``'s docstring.

* ``simulator``: :class:`~simulator.engine.delta.simulator.DeltaSimulator` -- the public API
  (construction, accessors, ``set_durations`` / ``set_devices`` / ``add_devices`` /
  ``replace_tasks``, the last in three steps: ``_remove_tasks``, ``_add_tasks``, ``_change_edges``),
  their argument checks, and ``_delta``: marks the dirty tasks (``_mark_dirty``), sets up the race
  with the resume, picks a sweep and routes its outcome (``_sweep_outcome``).
* ``race``: :class:`~simulator.engine.delta.race.SweepRace` -- one change's deadline checks: the
  budget, the race with the resume and the pace rule, "Fallback" above (``replan``, which the sweeps
  call when they pass a deadline).
* ``cost``: :class:`~simulator.engine.delta.cost.CostModel` -- the measured cost of a full run and of
  the resumed engine, and the choice between them.
* ``params``: the tunable constants (``RESUME_MAX_SHARE``, ``RESUME_RACE``, ``FALLBACK_WASTE``, the pace
  rule's ``PACE_*``, ``DEFAULT_KERNEL``, ``AUTO_BUDGET_PYTHON`` / ``AUTO_BUDGET_COMPILED``, ``QUEUE_CHUNK``), read at call time as ``params.NAME``.
* ``state``: :class:`~simulator.engine.delta.state.DeltaState` -- the per-task times, queue keys and
  queue devices, and the sweep's scratch; their allocation and growth (through ``extend_array``), and
  their numpy views in the compiled sweep's argument order (``views``).
* ``stats``: :class:`~simulator.engine.delta.stats.DeltaStats` (what a change cost), ``SweepAbort`` (a
  sweep gives up) and small shared helpers.
* ``queues``: the Python sweep's device queues (``DeviceQueue``), their lazy sources (``DeviceGroups``, a full
  run's grouping; ``QueueDump``, the compiled sweep's lists) and ``gather_rows`` (CSR rows, vectorized).
* ``sweep``: :class:`~simulator.engine.delta.sweep.PythonSweep` -- the Python event loop (``sweep``,
  "Delta algorithm" above; the steps that reach other tasks than the one at the sweep point are the
  closures of ``_steps``); ``backward_edge``, the check of the guarded sweep; ``ListGraph``, the graph
  as the Python loops read it.
* ``compiled``: the kernel choice (``delta_kernel``), :class:`~simulator.engine.delta.compiled.KernelGraph`
  (the graph's arrays for the kernels) and :class:`~simulator.engine.delta.compiled.CompiledSweep`, the
  compiled sweep's driver (``sweep``: pauses, deadline checks, outcome; it keeps the marked tasks, the
  re-keyed ones and whether a duration was lost to rounding for the simulator), "Compiled sweep" above.
* ``device_queues``: :class:`~simulator.engine.delta.device_queues.DeviceQueueSet` -- the device queues
  in both forms (``DeviceQueue`` objects for the Python sweep, linked lists for the compiled one), which
  of them is current, and the conversions (``as_objects``, ``as_links``).
* ``kernels_numba``: the compiled loop and its linked-list helpers (numba, extra ``fast``).
* ``static``: :class:`~simulator.engine.delta.static.StaticResweep` -- the static re-sweep's driver
  (``wanted`` / ``failed``: when to try and the back-off; ``resweep_nb`` / ``resweep_py``: the heap and
  the dense walk, the log put back on a refusal; the Python loop is ``_resweep_py_loop``; the orders
  it keeps between changes), returning a ``StaticOutcome`` the simulator records (``_static_resweep``),
  "Static re-sweep" above; ``kernels_static``:
  its compiled loops (numba).
* ``resume``: ``ResumeMixin`` -- full runs and the state rebuilt from them (``_full``, ``_adopt``),
  the fallback, the engine resumed from the sweep point (``_resume``: the final / rest split
  ``_final_upto``, the resumed graph ``_resume_graph``, the state patched ``_resume_patch``), and the
  CSR arrays handed to the engine (``_csr_arrays``, ``_pred_csr``), "Fallback" above.
"""
