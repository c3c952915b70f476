"""The optional compiled part of bdh: the fused element-wise CPU loops (bdh/model/kernels/cpu/_native.c).

Everything else is in pyproject.toml. The extension is optional: where it cannot be built (no C compiler,
no OpenMP), the install goes on without it and bdh runs the same steps in PyTorch
(`bdh.model.kernels.cpu.native.available()` says which).
"""

import sys

from setuptools import Extension, setup

openmp = [] if sys.platform in ("win32", "darwin") else ["-fopenmp"]
setup(
    ext_modules=[
        Extension(
            "bdh.model.kernels.cpu._native",
            sources=["src/bdh/model/kernels/cpu/_native.c"],
            define_macros=[("BDH_PYTHON_MODULE", "1")],
            extra_compile_args=["-O3", *openmp] if sys.platform != "win32" else ["/O2"],
            extra_link_args=openmp,
            optional=True,
        )
    ]
)
