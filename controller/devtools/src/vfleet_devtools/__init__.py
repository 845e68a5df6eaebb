"""Development code shared by vfleet's tests, benchmarks and tools; not part of the product.

`kvcases`: the real vLLM start-up records (tests/data/kv_cases) as budget requests.
`perfcases`: the measured serving runs (vfleet's data/perf_cases/measured.json) as estimate
requests. `perfscore`: the estimator scored against those runs, and the refits the
benchmark's cross-validation and the refit tool (controller/tools/refit.py) make.
"""
