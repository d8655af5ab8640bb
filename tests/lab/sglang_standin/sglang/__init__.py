"""Stand-in for the `sglang` package: only `python -m sglang.launch_server` (see launch_server.py)."""
__version__ = "0.5.9"
