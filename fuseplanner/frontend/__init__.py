"""ONNX model -> ModelGraph: read, infer shapes, classify nodes, absorb epilogues."""
