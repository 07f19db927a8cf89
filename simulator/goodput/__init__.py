"""A whole training run over days or weeks: failures, checkpoints, restarts and goodput (SimPy), and its plot.

The iteration simulator predicts one step; a long run also stops. This package replays a run as a
SimPy discrete-event simulation with few events (:mod:`simulator.goodput.replay`):

* one process per failure component (GPU, HBM, network, NIC, host, software, ...): an independent
  Poisson source with rate ``rate_per_device_hour x devices`` (defaults from the Llama 3 report,
  ``topologies/data/failure_rates.yaml``; fleet presets in ``failure_fleets.yaml``), or Weibull gaps
  with the same mean; job-level sources whose rate grows as a power of the job's GPUs; failure domains
  that take several nodes at once; one process per bad (lemon) node, drained after ``k`` failures;
  loss-spike rollbacks and planned maintenance windows;
* one repair process per failed node (a node that leaves the job comes back ``repair_hours`` later
  into the spare pool);
* a slow-node source: a node degrades, every synchronous step runs ``slowdown`` x longer until it is
  detected (``detection_hours``) and drained (a planned restart with a spare);
* the job: a process that trains in segments. Inside a segment the checkpoint cycle (``interval_s``
  seconds of training, then a save) is not simulated event by event: how much was trained and which
  checkpoint is the last durable one at any instant follow in closed form from the segment's start,
  so a 54-day run on 16 k GPUs costs a few hundred events, not one per step or checkpoint.

On a failure while training the job loses the work since the last durable checkpoint, stops after
``detection_s`` (a second failure while it is stopping is the same incident), waits for a spare or a
repair (or, ``elastic``, continues on fewer data-parallel replicas with the iteration time re-simulated
for the smaller job: DLRover, torchelastic), restarts (``restart_s``) and loads the checkpoint; a
failure while it restarts or loads makes it start over (Daly 2006's model). Synchronous saves block
for ``bytes / storage bandwidth``; asynchronous saves block only for the device-to-host snapshot and
become durable when the background write ends (MegaScale, Jiang et al. 2024, Section 4; torch.distributed
async_save).

Restart is detection + its parts (drain, reschedule, process start, NCCL init growing with the job)
+ load, drawn per restart with a spread when asked; saves may fail or be slowed (storage contention);
an asynchronous write still running when the next save is due is waited for (torchtitan).

Goodput = tokens trained / (tokens the failure-free job would train in the same wall time): the
effective training time over wall time; ``ettr_available`` divides by the time the job held its
nodes instead (Kokolis et al. 2024, Sec. V; both in docs/goodput.md). Every lost second is booked to one
mechanism (checkpoint saves, lost work, detection, waiting for repair, restart, load, slower elastic
job, slow node, planned drains / scale-ups), so ``useful + sum(losses) = wall time`` exactly (tested).

Checkpoint-interval closed forms (exponential failures, job MTBF ``M``, blocking save ``C``, restart
``R``): Young 1974 ("A first order approximation to the optimum checkpoint interval", CACM 17(9))
``tau = sqrt(2 C M)``; Daly 2006 ("A higher order estimate of the optimum checkpoint interval for
restart dumps", FGCS 22(3)), Eq. 37: ``tau = sqrt(2 C M) [1 + sqrt(C/(2M))/3 + C/(18 M)] - C`` for
``C < 2M``, else ``M``; expected wall time per unit of work (Daly 2006, Eq. 13):
``T_w / T_s = M e^{R/M} (e^{(tau + C)/M} - 1) / tau``, whose inverse is the closed-form goodput.

Determinism: each (seed, source) pair has its own ``numpy.random.Generator``; SimPy breaks time ties
by insertion order, so the same seeds give byte-identical results.

Layout (each module imports only the ones above it):

* ``model``: the run model (``Component``, ``RunModel``, ``RunResult``, ``check_run_model``) and the
  constants (``HOUR``, ``DAY``, ``MECHANISMS``, ``RATES_FILE``);
* ``closed_forms``: Young and Daly intervals, Daly's goodput (and with an asynchronous write) and the
  interval that maximises it; the oracles for bad nodes, Weibull counts and failure domains;
* ``fleets``: failure-rate presets from published fleet studies, the job-level fit, cross-fleet errors;
* ``replay``: the SimPy replay of one seed (``simulate_run``);
* ``seeds``: many seeds and interval sweeps (``Summary``, ``run_seeds``, ``sweep_intervals``,
  ``best_interval``, ``default_sweep``);
* ``setup``: a strategy file resolved for the run model (``setup_from_strategy``, default failure
  rates, checkpoint size, elastic iteration times);
* ``report``: the JSON-ready report over seeds and its text (``goodput_report``, ``format_goodput``);
* ``plot``: the figure (``execsim goodput --plot``).
"""
