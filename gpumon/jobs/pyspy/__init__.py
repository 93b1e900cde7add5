"""py-spy's estimate for a job without the hook.

sampler.py      PySpySampler: py-spy in rounds on its own thread (a JobSource)
estimate.py     EstimateView: the estimate so far, a frozen copy
categories.py   a main-thread stack's category (by protocol.activity); how a sync was seen
stacks.py       Frame, ThreadStack: py-spy's raw, dump and dump --json output parsed
target.py       check_target, find_pyspy, probe, explain_pyspy_failure: a live Python process, py-spy found
"""
