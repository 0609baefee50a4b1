"""selector's version (the one pyproject.toml declares)."""

__version__ = "0.1.0"
