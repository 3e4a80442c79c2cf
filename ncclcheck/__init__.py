"""ncclcheck: a doctor for PyTorch distributed jobs that hang or fail in NCCL or gloo."""

__version__ = "0.1.0"
