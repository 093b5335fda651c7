"""spyrl: the command line and version of the RLSVR / SpyRL reference implementation."""

__version__ = "0.1.0"
