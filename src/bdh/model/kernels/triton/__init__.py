"""The Triton kernels (CUDA; the tests run them in Triton's CPU interpreter)."""
