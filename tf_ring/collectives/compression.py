"""Gradient compression for the wire: Compression.none and Compression.fp16."""
import tensorflow as tf


class NoneCompressor:
    """Sends tensors unchanged."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor:
    """Sends float32/float64 tensors as float16 and casts the result back.

    Halves the bytes on the wire at the cost of float16 precision and range.
    Other dtypes (integers, float16, bfloat16) travel unchanged.
    """

    @staticmethod
    def compress(tensor):
        if tensor.dtype in (tf.float32, tf.float64):
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tf.cast(tensor, ctx) if ctx is not None else tensor


class Compression:
    """The compression choices, with Horovod's names."""
    none = NoneCompressor
    fp16 = FP16Compressor
