"""Training: what turns per-rank gradients into one update (tapes,
optimizers, the gradient reducer and its compressors such as PowerSGD)."""
