"""The cubin reader lives in the loader (loader/cubin.py), which checks each cubin's
parameters before launching it; the builder reads the same facts through it."""

from loader.cubin import EIATTR_KPARAM_INFO, EIATTR_REGCOUNT, CubinError, CubinInfo, inspect

__all__ = ["EIATTR_KPARAM_INFO", "EIATTR_REGCOUNT", "CubinError", "CubinInfo", "inspect"]
