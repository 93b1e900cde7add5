"""The directory `gpumon hook-path` prints: on a job's PYTHONPATH, its `gpumon` package is gpumon's own code alone."""
