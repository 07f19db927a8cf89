"""``execsim report``: the self-contained HTML report of a file."""
from __future__ import annotations

from simulator.cli.common import (
    EXAMPLE_NAME,
    FID_HELP,
    SET_HELP,
    add_command,
    check_command_outputs,
    input_file,
    input_files,
    load_input,
    pipeline_flags,
    simulate_one,
)
from simulator.cli.simulate import write_html


def add_parser(sub) -> None:
    s = add_command(sub, "report", "write the HTML report of a strategy file or pipeline description",
             [f"execsim report {EXAMPLE_NAME} -o report.html",
              "execsim report pipeline-interleaved -o pipe.html --set pipeline.pp=8"])
    s.add_argument("file", type=input_file, help="strategy file or pipeline description")
    s.add_argument("-o", "--output", metavar="OUT.html", required=True, help="the HTML file to write")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    s.add_argument("--fidelity", choices=("operator", "coarse"), help=FID_HELP)
    s.add_argument("--interval-level", default="0.8", metavar="LEVEL",
                   help="level of the stated prediction intervals, in (0, 1) (default 0.8)")
    s.set_defaults(func=_report_cmd)



def _report_cmd(args) -> int:
    from simulator.reports.intervals import check_level
    level = check_level(args.interval_level)
    kind, spec = load_input(args.file, args.set)
    pipeline_flags(args, kind)
    outs = check_command_outputs(args, input_files(args.file, kind, spec), output=args.output)
    sim = simulate_one(kind, spec, fidelity=args.fidelity)
    write_html(outs["--output"], args.file, kind, sim, args.set, level)
    print(f"report written to {args.output}")
    return 0
