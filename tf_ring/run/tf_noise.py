"""TensorFlow's known start-up lines, which tfringrun quiets on the ranks' stderr.

Every rank prints them, and TF_CPP_MIN_LOG_LEVEL=2 does not stop them: some
come before TensorFlow's logging starts (the absl WARNING line, the oneDNN
and cudart lines), the others are error-level though they mean nothing is
wrong (no GPU on this machine; oneDNN falls back to Eigen for a dtype on a CPU
without AVX-512). The list below is the only place they are named. Each
pattern matches one whole line (or the two lines of the CPU-feature notice),
with TensorFlow's own log prefix and the source file that prints it, so a
line of the user's that merely mentions the same words is kept, byte for
byte.
"""
import re

# TensorFlow's log prefix: absl's ("I0000 00:00:1796229414.189696    6367
# port.cc:153] ") or TensorFlow 2.15's ("2025-03-11 22:30:56.916762: I
# tensorflow/core/util/port.cc:113] "). `level` is I, W or E; `source` the
# file's name, which TensorFlow 2.15 gives with its directory.
_PREFIX = (rb"(?:%(level)s\d{4} \d\d:\d\d:\d+\.\d+ +\d+ %(source)s:\d+\] "
           rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: %(level)s (?:[\w.-]+/)*%(source)s:\d+\] )")


_ABSL_LINE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def _logged(level, source, message):
    return _PREFIX % {b"level": level, b"source": re.escape(source)} + message


# (why it is noise, the line's pattern without its end of line).
KNOWN_LINES = (
    ("absl's notice that TensorFlow logged before its logging started",
     re.escape(_ABSL_LINE)),
    ("oneDNN is on (the default on CPUs with AVX-512, or TF_ENABLE_ONEDNN_OPTS=1)",
     _logged(b"I", b"port.cc",
             rb"oneDNN custom operations are on\. You may see slightly different numerical "
             rb"results due to floating-point round-off errors from different computation "
             rb"orders\. To turn them off, set the environment variable "
             rb"`TF_ENABLE_ONEDNN_OPTS=0`\.")),
    ("the CPU has instructions this TensorFlow build does not use everywhere (two lines)",
     _logged(b"I", b"cpu_feature_guard.cc",
             rb"This TensorFlow binary is optimized to use available CPU instructions in "
             rb"performance-critical operations\.\r?\n"
             rb"To enable the following instructions: [A-Za-z0-9_. ]+, in other operations, "
             rb"rebuild TensorFlow with the appropriate compiler flags\.")),
    ("no GPU: the CUDA runtime library is absent",
     _logged(b"I", b"cudart_stub.cc",
             rb"Could not find cuda drivers on your machine, GPU will not be used\.")),
    ("no GPU: the CUDA driver found no device",
     rb"(?:%s|%s)failed call to cuInit: [^\n]*(?:UNKNOWN ERROR \(303\)|CUDA_ERROR_NO_DEVICE"
     rb"|no CUDA-capable device)[^\n]*"
     % (_logged(b"E", b"cuda_platform.cc", b""), _logged(b"E", b"cuda_driver.cc", b""))),
    ("oneDNN falls back to Eigen for a dtype on a CPU without AVX-512 (printed once, "
     "at the first such op)",
     _logged(b"E", b"util.cc",
             rb"oneDNN supports DT_[A-Z0-9_]+ only on platforms with AVX-512\. Falling back "
             rb"to the default Eigen-based implementation if present\.")),
)

_NOISE = re.compile(rb"(?:%s)\r?\n" % b"|".join(b"(?:%s)" % p for _, p in KNOWN_LINES))
# The start of a line that may still turn out to be noise when its end
# arrives: one of TensorFlow's prefixes begun, or the CPU-feature notice's
# first line waiting for its second.
_MAY_BE_NOISE = re.compile(
    rb"[IWE]\d{0,4}|[IWE]\d{4} [^\n]*|\d{1,4}|\d{4}-[^\n]*"
    rb"|%s\r?\n[^\n]*" % _logged(b"I", b"cpu_feature_guard.cc", rb"This TensorFlow binary [^\n]*"))


def _may_be_noise(rest):
    """`rest` holds no whole line of noise but may become one."""
    return _ABSL_LINE.startswith(rest) or _MAY_BE_NOISE.fullmatch(rest) is not None


def quiet(data, at_line_start=True, final=False):
    """Takes TensorFlow's known start-up lines out of `data` (bytes of a
    rank's stderr). Returns (shown, held): `held` is a trailing piece that
    may still become such a line when more arrives (give it back in front of
    the next data, or pass final=True to have it shown). at_line_start: `data`
    begins a line (False when the last byte shown was not a newline: then its
    first line is someone's continuation and is never dropped)."""
    shown, position = [], 0
    if not at_line_start:
        end = data.find(b"\n")
        if end < 0:
            return data, b""
        shown.append(data[:end + 1])
        position = end + 1
    while position < len(data):
        match = _NOISE.match(data, position)
        if match:
            position = match.end()
            continue
        if not final and _may_be_noise(data[position:]):
            return b"".join(shown), data[position:]
        end = data.find(b"\n", position)
        end = len(data) if end < 0 else end + 1
        shown.append(data[position:end])
        position = end
    return b"".join(shown), b""
