"""The evidence and its readers: what the children leave (step files, tensors, progress lines,
the recording), read as hostile bytes, bounded and linear, and the trusted replay's outputs."""
