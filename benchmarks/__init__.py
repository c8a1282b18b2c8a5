"""The project's own measurements, run from a checkout: `python benchmarks/bench.py --what=...`.

Clients of efficientdet_keras like any user's code, and not installed with it (setup.cfg
packages only efficientdet_keras). A user measures their own model with
`efficientdet-bench --model=PATH`.
"""
