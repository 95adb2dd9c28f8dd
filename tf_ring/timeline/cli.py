"""Command line: python -m tf_ring.timeline summarize out.json [--top N] [--plot out.png]"""
import argparse
import sys

from tf_ring.timeline import loading, plotting, report, summarizing

EXIT_NO_MATPLOTLIB = 2


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a whole number" % text)
    if value < 1:
        raise argparse.ArgumentTypeError("%r must be at least 1" % text)
    return value


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m tf_ring.timeline",
        description="Study a tf_ring timeline (written with tfringrun --timeline-filename, "
                    "TF_RING_TIMELINE or tf_ring.start_timeline).")
    commands = parser.add_subparsers(dest="command", required=True)
    summarize = commands.add_parser(
        "summarize", help="time per phase, longest negotiation waits, totals",
        description="Print time per phase, the tensors that waited longest in negotiation "
                    "(and for which ranks), and the trace's totals.")
    summarize.add_argument("trace", help="the timeline JSON file")
    summarize.add_argument("--top", type=_positive_int, default=10, metavar="N",
                           help="how many waiting tensors to list (default: 10)")
    summarize.add_argument("--plot", metavar="PNG",
                           help="also draw the summary to this PNG file (needs matplotlib)")
    return parser


def main(argv=None):
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    # Say so before reading a large trace, not after.
    if args.plot and not plotting.have_matplotlib():
        print("tf_ring.timeline: --plot needs matplotlib: pip install matplotlib", file=sys.stderr)
        return EXIT_NO_MATPLOTLIB
    try:
        trace = loading.load_trace(args.trace)
    except (OSError, ValueError) as e:
        print("tf_ring.timeline: cannot read %s: %s" % (args.trace, e), file=sys.stderr)
        return 1
    if trace.truncated:
        print("tf_ring.timeline: %s is truncated (was the job killed while writing it?); "
              "summarizing the %d complete events before the cut"
              % (args.trace, len(trace.events)), file=sys.stderr)
    summary = summarizing.summarize(trace.events)
    sys.stdout.write(report.format_summary(summary, top=args.top))
    if args.plot:
        plotting.plot_summary(summary, args.plot, top=args.top)
        print("tf_ring.timeline: wrote %s" % args.plot, file=sys.stderr)
    return 0
