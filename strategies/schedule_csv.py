"""Read and write schedules in PyTorch pipelining's schedule CSV format.

Format (PyTorch ``PipelineScheduleMulti._dump_csv`` / ``_load_csv``): one line per rank, rank 0
first; cells are actions such as ``0F0`` (stage, kind, microbatch), comma separated.  Empty
cells are idle steps (PyTorch writes ``None`` as an empty cell) and are skipped, and so are
PyTorch's communication/memory actions (``0SEND_F1``, ``2RECV_B0``, ``1UNSHARD``, ...).  A cell
``(0F1;3B0)OVERLAP_F_B`` is an overlapped forward/backward pair (PyTorch ``_Action.sub_actions``).

>>> s = read_schedule_csv("0F0,,0B0\\n1F0,1B0\\n")
>>> (s.pp, s.vpp, s.microbatches, s.stage_to_rank)
(2, 1, 1, (0, 1))
>>> print(write_schedule_csv(s), end="")
0F0,0B0
1F0,1B0
"""
from __future__ import annotations

import csv
import io
import os
import re

from strategies import actions as _actions
from strategies.actions import Action, Schedule, loop_placement, v_placement
from strategies.errors import ScheduleError, cut
from strategies.limits import MAX_ACTIONS
from strategies.validate import entry_actions

__all__ = ["infer_stage_to_rank", "read_schedule_csv", "write_schedule_csv"]

#: PyTorch's non-compute actions (``_ComputationType`` UNSHARD, RESHARD, SEND_F, RECV_F, SEND_B,
#: RECV_B, REDUCE_GRAD), written by ``_dump_csv`` of runtime schedules ("compute_comms" format).
#: They are dropped on reading: execsim derives communication from the stage dependencies.
_TORCH_NON_COMPUTE_RE = re.compile(r"^\s*\d*(UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)\d*\s*$")


def _load_text(path_or_text) -> str:
    """A ``os.PathLike`` or a ``str`` naming an existing file is read; any other ``str`` is CSV text."""
    from strategies.documents import read_csv_text
    if isinstance(path_or_text, os.PathLike):
        return read_csv_text(path_or_text, "schedule CSV")
    if not isinstance(path_or_text, str):
        raise ScheduleError(
            f"read_schedule_csv expects a path or CSV text, got {type(path_or_text).__name__}"
        )
    if "\n" not in path_or_text and "," not in path_or_text and "\x00" not in path_or_text \
            and os.path.isfile(path_or_text):
        return read_csv_text(path_or_text, "schedule CSV")
    return path_or_text


def _parse_cell(cell: str, rank: int, col: int):
    """One CSV cell -> an Action, an overlap entry, or ``None`` for an idle (blank) cell."""
    if not cell.strip() or _TORCH_NON_COMPUTE_RE.match(cell):
        return None
    # strategies.actions.parse_entry also reads overlapped pairs; fall back to plain actions.
    parse = getattr(_actions, "parse_entry", Action.parse)
    try:
        return parse(cell)
    except ScheduleError as exc:
        raise ScheduleError(f"line {rank + 1} (rank {rank}), column {col + 1}: {exc}") from None


def infer_stage_to_rank(orders, pp: int, num_stages: int) -> tuple[int, ...]:
    """Owning rank of every stage, from which rank's list holds that stage's actions.

    Source: PyTorch ``_validate_schedule`` builds ``stage_index_to_group_rank`` the same way and
    rejects a stage assigned to two ranks.  A stage that no rank runs is given its
    ``loop_placement`` rank, or its ``v_placement`` rank when the seen stages form a V
    (rank r holds stages r and 2*pp-1-r, as in zb-v / dualpipe-v).

    >>> infer_stage_to_rank([[Action(0, "F", 0), Action(3, "F", 0)], [Action(1, "F", 0), Action(2, "F", 0)]], 2, 4)
    (0, 1, 1, 0)
    """
    owner: dict[int, tuple[int, int]] = {}
    for r, order in enumerate(orders):
        for pos, entry in enumerate(order):
            for a in entry_actions(entry):
                prev = owner.setdefault(a.stage, (r, pos))
                if prev[0] != r:
                    raise ScheduleError(
                        f"line {r + 1} (rank {r}), column {pos + 1} (action {a}): stage {a.stage} also appears "
                        f"on rank {prev[0]} (line {prev[0] + 1}, column {prev[1] + 1}); a stage must live on one "
                        f"rank, so move all of stage {a.stage}'s actions to one line"
                    )
    vpp = num_stages // pp
    loop = loop_placement(pp, vpp)
    default = loop
    if vpp == 2 and any(loop[s] != r for s, (r, _) in owner.items()):
        vee = v_placement(pp)
        if all(vee[s] == r for s, (r, _) in owner.items()):
            default = vee
    return tuple(owner[s][0] if s in owner else default[s] for s in range(num_stages))


def read_schedule_csv(path_or_text, *, name: str = "custom", stage_to_rank=None) -> Schedule:
    """Parse a PyTorch-format schedule CSV into a ``Schedule``.

    Parameters
    ----------
    path_or_text : str or os.PathLike
        A path (``os.PathLike``, or a ``str`` naming an existing file) or the CSV text itself.
    name : str
        ``Schedule.name`` of the result.
    stage_to_rank : sequence of int, optional
        Placement to use; by default inferred with ``infer_stage_to_rank``.

    Returns
    -------
    Schedule
        ``pp`` = number of lines (trailing empty lines dropped), ``num_stages`` = 1 + largest
        stage, ``microbatches`` = 1 + largest microbatch, ``vpp = num_stages / pp``.  The result is
        not validated: call ``strategies.validate.validate_schedule`` for that.

    Raises
    ------
    ScheduleError
        A cell that does not parse (naming its line and column), an empty file, a stage count
        that is not a multiple of pp, or a stage that appears on two ranks.
    """
    text = _load_text(path_or_text)
    rows = list(csv.reader(io.StringIO(text)))
    while rows and not any(c.strip() for c in rows[-1]):
        rows.pop()
    if not rows:
        raise ScheduleError("schedule CSV is empty: expected one line of actions (e.g. '0F0,0B0') per rank")
    orders = []
    for r, row in enumerate(rows):
        cells = (_parse_cell(c, r, col) for col, c in enumerate(row))
        orders.append(tuple(e for e in cells if e is not None))
    orders = tuple(orders)
    flat = [a for order in orders for e in order for a in entry_actions(e)]
    if not flat:
        raise ScheduleError("schedule CSV has no actions: expected cells such as '0F0' (stage, kind, microbatch)")
    if len(flat) > MAX_ACTIONS:
        raise ScheduleError(f"schedule CSV has {len(flat):,} actions, over the limit of {MAX_ACTIONS:,} "
                            f"(docs/strategy-file.md, Limits)")
    pp = len(orders)
    top_stage = max(flat, key=lambda a: a.stage)
    top_mb = max(flat, key=lambda a: a.mb)
    num_stages = 1 + top_stage.stage
    microbatches = 1 + top_mb.mb
    if num_stages > len(flat) + pp or microbatches > len(flat):
        # a complete schedule has a forward and a backward of every (stage, microbatch) pair, so a
        # stage or microbatch index beyond the number of actions is a typo (and sizing tables by it
        # would cost memory in proportion to that number)
        big = top_stage if num_stages > len(flat) + pp else top_mb
        raise ScheduleError(f"action {cut(str(big), 40)} implies {num_stages:,} stages and {microbatches:,} "
                            f"microbatches, but the CSV has only {len(flat):,} actions (a complete schedule has a "
                            f"forward and a backward of each stage and microbatch); check that cell")
    if stage_to_rank is not None:
        stage_to_rank = tuple(stage_to_rank)
        if len(stage_to_rank) < num_stages:
            raise ScheduleError(
                f"stage_to_rank has {len(stage_to_rank)} entries but the CSV uses stages 0..{num_stages - 1}; "
                f"give one rank per stage"
            )
        num_stages = len(stage_to_rank)
    if num_stages % pp:
        raise ScheduleError(
            f"schedule CSV has {pp} lines (ranks) but {num_stages} stages (0..{num_stages - 1}); the stage "
            f"count must be a multiple of the rank count so every rank holds vpp = stages/pp stages"
        )
    if stage_to_rank is None:
        stage_to_rank = infer_stage_to_rank(orders, pp, num_stages)
    return Schedule(name, pp, microbatches, num_stages // pp, stage_to_rank, orders)


def write_schedule_csv(schedule: Schedule) -> str:
    """PyTorch-format CSV text: one line per rank, actions comma separated, no idle cells.

    An overlap entry is written PyTorch-style as ``(<forward>;<backward>)OVERLAP_F_B``. A schedule of
    several pipelines on the same ranks (``Schedule.segments``: DualPipe's two directions) is refused:
    the format has no way to say where one pipeline ends, so it would read back as one wrong pipeline.
    """
    if schedule.segments:
        raise ScheduleError(f"schedule {schedule.name!r} runs {len(schedule.segments)} pipelines (directions) on the "
                            f"same ranks, which a PyTorch action CSV cannot carry (it would read back as one "
                            f"pipeline); use --json, or the grid (no flag)")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for order in schedule.orders:
        writer.writerow([str(entry) for entry in order])
    return buf.getvalue()
