"""Spark-side column handling shared by fit and transform: which columns a
DataFrame lacks, and ML vectors turned into arrays (Parquet and Arrow carry
arrays; Spark's VectorUDT they do not)."""


def check_present(df, wanted, what):
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        raise ValueError("KerasEstimator: %s %s not in the DataFrame (its columns: %s)"
                         % (what, ", ".join(repr(c) for c in missing), ", ".join(df.columns)))


def as_array(df, name):
    """The column as Spark SQL sees it, ML vectors as array<float>."""
    from pyspark.sql import functions as F
    from pyspark.ml.linalg import VectorUDT
    field = df.schema[name]
    if isinstance(field.dataType, VectorUDT):
        from pyspark.ml.functions import vector_to_array
        return vector_to_array(F.col(name), "float32").alias(name)
    return F.col(name)
