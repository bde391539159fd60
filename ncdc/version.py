"""The version of ncdc: it keys the caches and stamps every file and record ncdc writes."""

__version__ = "0.1.0"
