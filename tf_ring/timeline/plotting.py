"""Draws where the time went: phase shares as one stacked bar, and the
tensors that waited longest in negotiation.

matplotlib is optional; the caller checks for it (see have_matplotlib).
Uses the Agg canvas directly so no display or pyplot state is involved.
"""
import importlib.util


def have_matplotlib():
    return importlib.util.find_spec("matplotlib") is not None


def plot_summary(summary, path, top=10):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    waits = summary.waits[:top]
    fig = Figure(figsize=(10, 3 + 0.35 * max(len(waits), 1)))
    FigureCanvasAgg(fig)
    shares_ax, waits_ax = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1, 2]})

    left = 0.0
    for phase in summary.phases:
        width = 100.0 * phase.share
        shares_ax.barh([0], [width], left=[left], label=phase.phase)
        left += width
    shares_ax.set_xlim(0, 100)
    shares_ax.set_yticks([])
    shares_ax.set_xlabel("share of total phase time (%)")
    shares_ax.set_title("Where the time goes" +
                        (" (%s)" % summary.process if summary.process else ""))
    if summary.phases:
        shares_ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small",
                         frameon=False)

    # Longest wait at the top.
    names = [w.tensor for w in reversed(waits)]
    waits_ax.barh(range(len(waits)), [w.total_us / 1000.0 for w in reversed(waits)],
                  color="tab:gray")
    waits_ax.set_yticks(range(len(waits)))
    waits_ax.set_yticklabels(names, fontsize="small")
    waits_ax.set_xlabel("total time in NEGOTIATE (ms)")
    waits_ax.set_title("Top %d tensors by negotiation wait" % len(waits))
    fig.tight_layout()
    # "tight" keeps the legend beside the bar inside the image.
    fig.savefig(path, format="png", dpi=100, bbox_inches="tight")
