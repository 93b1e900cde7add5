"""gpumon: a terminal dashboard that shows why a GPU is underused while PyTorch trains."""

__version__ = "0.1.0"
