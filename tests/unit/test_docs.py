"""The documentation holds together: links resolve, the README stays a short
front page with CI's test command in it, and no section of the old long README
was dropped when it was split into docs/.

Pure Python (no TensorFlow, no tf_ring), so it runs anywhere in a second.
"""
import glob
import os
import re

import pytest

from conftest import REPO

README = os.path.join(REPO, "README.md")
README_MAX_LINES = 400

# Every `##` heading of the README before it was split into docs/ (1,098
# lines). Each must still be a heading somewhere: nothing was lost.
OLD_README_HEADINGS = [
    "Quick start",
    "Running jobs: `tfringrun`",
    "Several machines",
    "Migrating from Horovod",
    "API",
    "Uneven data: `join()`",
    "Process sets",
    "Errors",
    "When things go wrong: what tf_ring guarantees",
    "Engine settings",
    "Timeline",
    "Autotune",
    "How the engine works",
    "Training with a `tf.function` loop: `DistributedGradientTape`",
    "v1 graphs: `MonitoredTrainingSession` and Estimator",
    "Supported TensorFlow versions",
    "GPUs (NCCL)",
    "Examples",
    "Keras",
    "Layout",
]
# Its `###` headings too.
OLD_README_SUBHEADINGS = [
    "Launcher flags",
    "Checking the build",
    "Logging",
    "Keras examples",
    "Keras fit throughput",
]


def markdown_files():
    files = [README, os.path.join(REPO, "benchmarks", "README.md")]
    files += sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    return files


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def without_code(text):
    """The text outside fenced code blocks and inline code spans."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def headings(text):
    """The text of every ATX heading outside code blocks."""
    return [m.group(2).strip() for m in re.finditer(r"^(#{1,6})\s+(.*?)\s*#*\s*$",
                                                     without_code(text), re.M)]


def github_anchor(heading):
    """GitHub's id for a heading: lowercase, punctuation other than '-' and
    '_' dropped, each space a '-'."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    for h in headings(read(path)):
        base = github_anchor(h)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else "%s-%d" % (base, n))
    return out


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def relative_links(path):
    """(line number, target) of every link that is not a URL, outside code."""
    text = read(path)
    # Inline code may hold brackets and parentheses; it never holds links.
    prose = re.sub(r"`[^`\n]*`", lambda m: " " * len(m.group(0)), without_code(text))
    for number, line in enumerate(prose.split("\n"), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            yield number, target


def test_markdown_files_exist():
    assert os.path.isfile(README)
    assert len(markdown_files()) > 3, "expected docs/*.md beside the README"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: os.path.relpath(p, REPO))
def test_relative_links_resolve(path):
    broken = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = path if not file_part else os.path.normpath(
            os.path.join(os.path.dirname(path), file_part))
        where = "%s:%d: %s" % (os.path.relpath(path, REPO), number, target)
        if not os.path.exists(dest):
            broken.append(where + " (no such file)")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            broken.append(where + " (no heading with that anchor in %s)"
                          % os.path.relpath(dest, REPO))
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_readme_is_a_short_front_page():
    lines = read(README).count("\n")
    assert lines <= README_MAX_LINES, (
        "README.md has %d lines; keep it at most %d and move detail to docs/"
        % (lines, README_MAX_LINES))


def ci_test_command():
    """The command .ci/readme_test_command.sh runs: its last line that is not
    a comment, blank or `set ...`."""
    with open(os.path.join(REPO, ".ci", "readme_test_command.sh"), encoding="utf-8") as f:
        lines = [ln.strip() for ln in f]
    commands = [ln for ln in lines if ln and not ln.startswith("#")]
    return commands[-1]


def bash_blocks(text):
    return re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)


def test_readme_shows_the_command_ci_runs():
    command = ci_test_command()
    assert command.startswith("pip install"), command
    blocks = bash_blocks(read(README))
    assert any(command in block.split("\n") for block in blocks), (
        "README.md must show, verbatim in a ```bash block, the command "
        ".ci/readme_test_command.sh runs:\n" + command)


def test_no_old_readme_section_was_lost():
    found = set()
    for path in [README] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))):
        found.update(headings(read(path)))
    missing = [h for h in OLD_README_HEADINGS + OLD_README_SUBHEADINGS if h not in found]
    assert not missing, ("these sections of the old README are no heading in README.md "
                         "or docs/*.md any more: %s" % missing)


def test_github_anchor_rules():
    assert github_anchor("GPUs (NCCL)") == "gpus-nccl"
    assert github_anchor("Uneven data: `join()`") == "uneven-data-join"
    assert github_anchor("GPU: tf_ring's NCCL path vs torch.distributed") == \
        "gpu-tf_rings-nccl-path-vs-torchdistributed"
    assert github_anchor("Training with a `tf.function` loop: `DistributedGradientTape`") == \
        "training-with-a-tffunction-loop-distributedgradienttape"
