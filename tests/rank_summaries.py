"""Each rank's pytest outcome, told exactly to the test that launched the ranks.

A test that runs a pytest file on every rank (tests/conftest.py's
run_parallel_pytest, tests/multihost/test_hierarchical.py) sets SUMMARY_VAR
in the job's environment. Every rank's pytest then ends by printing one line,
MARKER followed by JSON: its rank, how many tests passed, failed, skipped,
errored, xfailed and xpassed, and each skip's test and reason
(tests/conftest.py's pytest_sessionfinish writes it). The launching test
reads every rank's line from the job's output and judges them together
(judge): every rank must have reported, none may have failed or errored,
all must agree on their counts and something must have run. A skip on a
rank never counts as a pass: the launching test is skipped with the ranks'
reasons (and the whole suite then fails on that skip unless
tests/allowed_skips.py lists it).

Counting " passed" in the merged output could not tell "3 passed, 1
skipped" from "4 passed", nor one rank's summary printed twice from two
ranks' summaries.
"""
import json
import os
import re

import pytest

SUMMARY_VAR = "TF_RING_TEST_RANK_SUMMARY"
MARKER = "tf_ring-rank-summary "
COUNTS = ("passed", "failed", "skipped", "error", "xfailed", "xpassed")
# A skip's reason is cut to this length, so a rank's line stays one short write.
_REASON_CHARS = 300
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def summary_of(stats, rank):
    """A rank's summary from pytest's terminal reporter `stats` (category ->
    reports, as pytest's own final line counts them)."""
    skips = []
    for report in stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
        skips.append([getattr(report, "nodeid", "?"), reason[:_REASON_CHARS]])
    return {"rank": rank, "counts": {name: len(stats.get(name, [])) for name in COUNTS},
            "skips": skips}


def summary_line(summary):
    return MARKER + json.dumps(summary, sort_keys=True)


def this_rank():
    """The rank as the launcher's MPI tells it, or -1 outside one."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return -1


def read_summaries(output):
    """Every rank's summary in a job's merged output, in the order printed.
    A marked line that is not a whole summary raises ValueError (an
    interleaved or cut line must not pass for a report)."""
    found = []
    for line in _ANSI.sub("", output).splitlines():
        at = line.find(MARKER)
        if at < 0:
            continue
        try:
            summary = json.loads(line[at + len(MARKER):])
            ok = (isinstance(summary["rank"], int) and isinstance(summary["skips"], list)
                  and all(isinstance(summary["counts"][n], int) for n in COUNTS))
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            raise ValueError("a rank's summary line is damaged: %r" % line[:500])
        found.append(summary)
    return found


def _counts_text(counts):
    said = ["%d %s" % (counts[n], n) for n in COUNTS if counts[n]]
    return ", ".join(said) or "nothing ran"


class Verdict(object):
    """What the launching test makes of its ranks: "pass", "skip" or "fail", and why."""

    def __init__(self, kind, message):
        self.kind, self.message = kind, message

    def __repr__(self):
        return "Verdict(%r, %r)" % (self.kind, self.message)


def judge(summaries, np):
    ranks = sorted(s["rank"] for s in summaries)
    if ranks != list(range(np)):
        return Verdict("fail", "expected one summary from each of ranks 0..%d, got them from "
                               "ranks %s: a rank ended without finishing its pytest session"
                       % (np - 1, ranks))
    by_rank = {s["rank"]: s for s in summaries}
    bad = ["rank %d: %s" % (r, _counts_text(by_rank[r]["counts"])) for r in ranks
           if by_rank[r]["counts"]["failed"] or by_rank[r]["counts"]["error"]]
    if bad:
        return Verdict("fail", "tests failed or errored on a rank: " + "; ".join(bad))
    if len({json.dumps(by_rank[r]["counts"], sort_keys=True) for r in ranks}) > 1:
        return Verdict("fail", "the ranks ran different tests: " + "; ".join(
            "rank %d: %s" % (r, _counts_text(by_rank[r]["counts"])) for r in ranks))
    counts = by_rank[0]["counts"]
    if not (counts["passed"] or counts["skipped"] or counts["xfailed"]):
        return Verdict("fail", "no test ran on any rank (nothing collected, or all deselected)")
    if counts["skipped"]:
        who = {}
        for r in ranks:
            for nodeid, reason in by_rank[r]["skips"]:
                who.setdefault((nodeid, reason), []).append(r)
        return Verdict("skip", "%d test(s) skipped on the ranks (%s on each): %s" % (
            counts["skipped"], _counts_text(counts), "; ".join(
                "%s on rank(s) %s: %s" % (nodeid, ",".join(map(str, rs)), reason)
                for (nodeid, reason), rs in sorted(who.items()))))
    return Verdict("pass", "%s on each of %d ranks" % (_counts_text(counts), np))


def check_ranks(output, np):
    """In the launching test: fails it, or skips it with the ranks' reasons,
    unless every rank ran the same tests and all passed."""
    try:
        verdict = judge(read_summaries(output), np)
    except ValueError as e:
        verdict = Verdict("fail", str(e))
    if verdict.kind == "fail":
        pytest.fail("%s\n--- the job's output (end) ---\n%s" % (verdict.message, output[-6000:]))
    if verdict.kind == "skip":
        pytest.skip(verdict.message)
    return verdict
