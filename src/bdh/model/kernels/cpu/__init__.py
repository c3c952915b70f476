"""The compiled CPU loops (C, OpenMP; built by setup.py where a compiler is) and their PyTorch operators."""
