"""tapegrad's version (its own module, so that train/ can name it without importing the package)."""

__version__ = "0.1.0"
