"""Measurement on the GPU: reference outputs, timing, counters, accuracy reports, fits."""
