"""Settings for the whole suite.

Hypothesis's per-example deadline is a timing assertion: on a loaded 2-core machine an
example of a correct property can take longer than 200 ms. Properties are checked for
their answers only; speed is measured in ``benchmarks/``.
"""

from hypothesis import settings

settings.register_profile("asyncshard", deadline=None)
settings.load_profile("asyncshard")
