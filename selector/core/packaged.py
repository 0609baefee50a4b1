"""Where the packaged conf/ is: `selector/conf` in a wheel, `conf/` in a checkout."""
from __future__ import annotations

from pathlib import Path

from selector.core.errors import SelectorError


def packaged_conf_dir() -> Path:
    """conf/ as shipped: `selector/conf` in an installed wheel, `conf/` in a checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    try:  # an editable install maps the package `selector.conf` onto the checkout's conf/
        from importlib.resources import files
        path = Path(str(files("selector.conf")))
        if (path / "config.yaml").is_file():
            return path
    except (ImportError, ModuleNotFoundError, TypeError):
        pass
    raise SelectorError("selector's packaged config directory (conf/config.yaml) is missing: "
                        "reinstall selector")
