"""Packaged Hydra configs of selector (installed as the package `selector.conf`)."""
