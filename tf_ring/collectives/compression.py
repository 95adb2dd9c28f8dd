"""Compression on the wire: Compression.none, fp16 and bf16 (casts, stateless).
tf_ring.Compression, the public one, adds powersgd (tf_ring/training/compression.py)."""
import tensorflow as tf


class NoneCompressor:
    """Sends tensors unchanged."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor:
    """Sends float32/float64 tensors as `wire` and casts the result back;
    other dtypes (integers, 16-bit floats) travel unchanged."""
    wire = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype in (tf.float32, tf.float64):
            return tf.cast(tensor, cls.wire), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tf.cast(tensor, ctx) if ctx is not None else tensor


class FP16Compressor(_CastCompressor):
    """float16 on the wire: half the bytes, 11 bits of precision, and a range
    that ends at 65504 (a larger gradient, or a sum of them, becomes inf)."""
    wire = tf.float16


class BF16Compressor(_CastCompressor):
    """bfloat16 on the wire: half the bytes, float32's range (no overflow),
    8 bits of precision (less than fp16's 11)."""
    wire = tf.bfloat16


class Compression:
    """The collectives' compression choices, with Horovod's names; bf16 is tf_ring's."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
