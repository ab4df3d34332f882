from packaging.version import Version

__all__ = ["Version"]
