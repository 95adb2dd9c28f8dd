"""tfringrun's list of TensorFlow's start-up lines (tf_ring/run/tf_noise.py):
the real lines go, a user's lines that look like them stay byte for byte,
and a line cut across reads is judged whole."""
from tf_ring.run import tf_noise

# Captured from TensorFlow 2.21 on this CPU (AVX2, no AVX-512, no GPU) with
# TF_CPP_MIN_LOG_LEVEL=0 and TF_ENABLE_ONEDNN_OPTS=1, and a float16 matmul.
TF_221 = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    b"I0000 00:00:1796229414.189696    6367 port.cc:153] oneDNN custom operations are on. You "
    b"may see slightly different numerical results due to floating-point round-off errors from "
    b"different computation orders. To turn them off, set the environment variable "
    b"`TF_ENABLE_ONEDNN_OPTS=0`.\n"
    b"I0000 00:00:1796229414.191042    6367 cudart_stub.cc:31] Could not find cuda drivers on "
    b"your machine, GPU will not be used.\n"
    b"I0000 00:00:1796229437.017307    6558 cpu_feature_guard.cc:227] This TensorFlow binary is "
    b"optimized to use available CPU instructions in performance-critical operations.\n"
    b"To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow "
    b"with the appropriate compiler flags.\n"
    b"E0000 00:00:1796229431.526418    6367 cuda_platform.cc:52] failed call to cuInit: "
    b"INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n"
    b"E0000 00:00:1796229431.622140    6367 util.cc:131] oneDNN supports DT_HALF only on "
    b"platforms with AVX-512. Falling back to the default Eigen-based implementation if "
    b"present.\n")
# The same notices in TensorFlow 2.15's prefix (date, level, source path).
TF_215 = (
    b"2025-03-11 22:30:56.123456: I tensorflow/core/util/port.cc:113] oneDNN custom operations "
    b"are on. You may see slightly different numerical results due to floating-point round-off "
    b"errors from different computation orders. To turn them off, set the environment variable "
    b"`TF_ENABLE_ONEDNN_OPTS=0`.\n"
    b"2025-03-11 22:30:56.916762: I tensorflow/core/platform/cpu_feature_guard.cc:210] This "
    b"TensorFlow binary is optimized to use available CPU instructions in performance-critical "
    b"operations.\r\n"
    b"To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild "
    b"TensorFlow with the appropriate compiler flags.\r\n"
    b"2025-03-11 22:30:58.742701: E tensorflow/core/util/util.cc:131] oneDNN supports DT_BOOL "
    b"only on platforms with AVX-512. Falling back to the default Eigen-based implementation "
    b"if present.\n"
    b"2024-11-01 10:50:26.662986: E external/local_xla/xla/stream_executor/cuda/"
    b"cuda_driver.cc:152] failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device "
    b"is detected\n")
# A user's own lines: the same words without TensorFlow's prefix, another
# source file, another level, text around them, a real TensorFlow error.
USERS = (
    b"epoch 1 loss 0.3\n"
    b"oneDNN custom operations are on. You may see slightly different numerical results due to "
    b"floating-point round-off errors from different computation orders. To turn them off, set "
    b"the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.\n"
    b"I0000 00:00:1.5    7 my_port.cc:153] oneDNN custom operations are on. You may see slightly "
    b"different numerical results due to floating-point round-off errors from different "
    b"computation orders. To turn them off, set the environment variable "
    b"`TF_ENABLE_ONEDNN_OPTS=0`.\n"
    b"W0000 00:00:1.5    7 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU "
    b"will not be used.\n"
    b"> WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR!\n"
    b"I0000 00:00:1.5    7 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    b"available CPU instructions in performance-critical operations.\n"
    b"my next line, not TensorFlow's second\n"
    b"E0000 00:00:1.5    7 cuda_platform.cc:52] failed call to cuInit: out of memory\n"
    b"E0000 00:00:1.5    7 util.cc:131] oneDNN supports DT_HALF only on platforms with "
    b"AVX-512. Falling back to the default Eigen-based implementation if present. (mine)\n"
    b"E0000 00:00:1796229431.5    6367 some_kernel.cc:9] a real TensorFlow error stays\n"
    b"Epoch 1/5\n\r 1/198 \xe2\x94\x81\xe2\x94\x81 loss 0.69\r198/198 done\n")


def quiet_all(data):
    shown, held = tf_noise.quiet(data)
    return shown + tf_noise.quiet(held, final=True)[0]


def test_every_known_line_goes_and_nothing_else():
    assert quiet_all(TF_221) == b""
    assert quiet_all(TF_215) == b""
    assert quiet_all(USERS) == USERS
    # Interleaved, line by line, as two ranks' output arrives.
    noise = (TF_221 + TF_215).splitlines(keepends=True)
    users = USERS.splitlines(keepends=True)
    # The cpu_feature_guard notice's two lines stay together.
    mixed = b"".join(users[:6]) + b"".join(noise[:3]) + b"".join(users[6:]) + b"".join(noise[3:])
    assert quiet_all(mixed) == USERS


def test_a_line_cut_across_reads_is_judged_whole():
    """mpirun's reads cut lines anywhere: at every cut, what is shown at once
    plus what is shown after the rest arrives is what one read would show."""
    split = USERS.index(b"W0000")
    data = USERS[:split] + TF_221 + USERS[split:] + TF_215
    for cut in range(len(data)):
        first, held = tf_noise.quiet(data[:cut])
        second, left = tf_noise.quiet(held + data[cut:],
                                      at_line_start=first[-1:] in (b"", b"\n"))
        assert first + second + tf_noise.quiet(left, final=True)[0] == USERS, cut


def test_only_what_may_still_become_noise_is_held():
    assert tf_noise.quiet(b"progress 10%\r") == (b"progress 10%\r", b"")
    assert tf_noise.quiet(b"mine\nE0000 00:00:17962") == (b"mine\n", b"E0000 00:00:17962")
    assert tf_noise.quiet(b"WARNING: All log") == (b"", b"WARNING: All log")
    assert tf_noise.quiet(b"WARNING: mine") == (b"WARNING: mine", b"")
    first_of_two = TF_221.splitlines(keepends=True)[3]
    assert tf_noise.quiet(first_of_two) == (b"", first_of_two)
    assert tf_noise.quiet(first_of_two, final=True) == (first_of_two, b"")


def test_a_continued_line_is_never_dropped():
    """After a piece without a newline was shown, the next data's first line
    is the rest of someone's line, even when it reads like a known one."""
    assert tf_noise.quiet(TF_221, at_line_start=False)[0] == TF_221.splitlines(keepends=True)[0]
    assert tf_noise.quiet(b"tail", at_line_start=False) == (b"tail", b"")
