"""The plain-PyTorch kernels: the paper's three attention forms and their faster variants, RoPE, dropout masks."""
