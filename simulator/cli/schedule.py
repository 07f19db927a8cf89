"""``execsim schedule``: print a pipeline schedule's per-rank grid, JSON or action CSV."""
from __future__ import annotations

import json
import sys

from simulator.cli.common import MKDIR_HELP, add_command, check_command_outputs


def add_parser(sub) -> None:
    s = add_command(sub, "schedule", "print a pipeline schedule's per-rank action grid",
             ["execsim schedule --schedule interleaved-1f1b --pp 4 --microbatches 8 --vpp 2",
              "execsim schedule --schedule zb-h1 --pp 4 --microbatches 8 --csv > zb.csv"])
    s.add_argument("--schedule", required=True, help="schedule name: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, "
                   "dualpipe-v, dualpipe, looped-bfs")
    s.add_argument("--pp", type=int, required=True, help="pipeline ranks")
    s.add_argument("--microbatches", type=int, required=True, help="microbatches per iteration")
    s.add_argument("--vpp", type=int, default=1, help="chunks (virtual stages) per rank (default 1)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="machine-readable output")
    g.add_argument("--csv", action="store_true", help="PyTorch action CSV (one line per rank)")
    s.add_argument("--output", "-o", metavar="FILE", help="write to FILE (atomically) instead of stdout")
    s.add_argument("--mkdir", action="store_true", help=MKDIR_HELP)
    s.set_defaults(func=_schedule_cmd)



def _schedule_cmd(args) -> int:
    from strategies.schedules import get_schedule
    outs = check_command_outputs(args, [], output=args.output)
    sched = get_schedule(args.schedule, args.pp, args.microbatches, args.vpp)
    if args.json:
        d = sched.to_json()
        text = json.dumps({k: d[k] for k in ("pp", "microbatches", "vpp", "stage_to_rank", "segments", "orders")
                           if k in d}) + "\n"
    elif args.csv:
        from strategies.schedule_csv import write_schedule_csv
        text = write_schedule_csv(sched)
    else:
        text = sched.grid() + "\n"
    if outs:
        from simulator.outputs.files import write_output
        write_output(outs["--output"], text, "--output")
    else:
        sys.stdout.write(text)
    return 0
