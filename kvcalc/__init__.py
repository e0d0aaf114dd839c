"""kvcalc: will this model fit on this GPU under this engine, and how fast will it decode?"""

__version__ = "0.1.0"
