"""Whole-model executor: runs an ONNX model on the GPU."""
