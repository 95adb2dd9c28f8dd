"""Plain-text report of a Summary: aligned tables, no dependencies."""


def format_table(headers, rows, text_columns=(0,)):
    """Left-aligns the text columns, right-aligns the rest (numbers)."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        parts = [c.ljust(w) if i in text_columns else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _ms(us):
    return "%.3f" % (us / 1000.0)


def _ranks(waited_for):
    if not waited_for:
        return "-"
    return ", ".join("%s (%dx)" % (rank, count) for rank, count in waited_for)


def format_summary(summary, top=10):
    out = []
    title = "tf_ring timeline" + (": " + summary.process if summary.process else "")
    out += [title, ""]
    out.append("Time per phase (summed over tensors; a fused batch counts once per tensor):")
    out.append(format_table(
        ["phase", "events", "total ms", "mean ms", "max ms", "share %"],
        [[p.phase, p.events, _ms(p.total_us), _ms(p.mean_us), _ms(p.max_us),
          "%.1f" % (100.0 * p.share)] for p in summary.phases]))
    out += ["", "Top %d tensors by time waiting in NEGOTIATE:" % top]
    waits = summary.waits[:top]
    if waits:
        out.append(format_table(
            ["tensor", "negotiations", "total wait ms", "mean wait ms", "via coordinator",
             "waited for ranks (times)"],
            [[w.tensor, w.negotiations, _ms(w.total_us), _ms(w.mean_us), w.via_coordinator,
              _ranks(w.waited_for)] for w in waits],
            text_columns=(0, 5)))
    else:
        out.append("(no NEGOTIATE events)")
    cycles = ("%d" % summary.cycles if summary.cycles is not None
              else "not marked (run with --timeline-mark-cycles)")
    out += ["", "Totals:",
            "  tensors:    %d" % summary.tensors,
            "  cycles:     %s" % cycles,
            "  wall span:  %s ms" % _ms(summary.span_us)]
    if summary.errors:
        out.append("  errors:     %d collective(s) reported an error" % summary.errors)
    return "\n".join(out) + "\n"
