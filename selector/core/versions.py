"""Strict parsing of versions, specifiers and compute capabilities (all comparisons via `packaging`)."""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Optional, Tuple

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from selector.core.errors import bad_input

_NAME_SEP = re.compile(r"[-_.]+")


def canonicalize_name(name: str) -> str:
    """A distribution's normalized name (PEP 503: runs of '-', '_', '.' become one '-', lower
    case), as packaging.utils.canonicalize_name computes it; here because packaging.utils
    imports packaging.tags (about 20 ms of every start, for a regular expression)."""
    return _NAME_SEP.sub("-", name).lower()


_CAPABILITY = re.compile(r"^([0-9]{1,2})\.([0-9]{1,2})$")  # ASCII digits only, as versions


@lru_cache(maxsize=1024)
def _version(text: str) -> Version:
    return Version(text)


def parse_version(key: str, value: object, *, where: Optional[str] = None) -> Optional[Version]:
    """A PEP 440 version from a string; None stays None. Numbers are refused: 4.10 would be 4.1."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_input(key, value, "is not a version string; quote it (for example '4.10'), "
                        "since an unquoted number loses digits (4.10 becomes 4.1)", where=where)
    try:
        return _version(value.strip())
    except InvalidVersion:
        raise bad_input(key, value, "is not a valid PEP 440 version (for example '0.6.11', "
                        "'4.5.0', '2.11.0+cu130')", where=where) from None


@lru_cache(maxsize=1024)
def _specifier(text: str) -> SpecifierSet:
    return SpecifierSet(text, prereleases=True)


def parse_specifier(key: str, value: object, *, where: Optional[str] = None) -> SpecifierSet:
    """A PEP 440 specifier set such as '>=0.6.9,<0.6.11'; '' means any installed version."""
    if not isinstance(value, str):
        raise bad_input(key, value, "is not a specifier string such as '>=0.6.9'", where=where)
    try:
        return _specifier(value.strip())
    except InvalidSpecifier:
        raise bad_input(key, value, "is not a valid PEP 440 specifier (for example '>=0.6.9', "
                        "'>=4.4,<4.5', '==0.7.2.*'; '' means any installed version)",
                        where=where) from None


def parse_capability(key: str, value: object, *, where: Optional[str] = None
                     ) -> Optional[Tuple[int, int]]:
    """A compute capability "major.minor" as a tuple; None means no GPU."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_input(key, value, 'is not a capability string; write it as "major.minor" in '
                        'quotes, for example "12.1"', where=where)
    m = _CAPABILITY.match(value.strip())
    if not m:
        raise bad_input(key, value, 'is not a compute capability; write "major.minor", '
                        'for example "9.0", "10.3", "12.1"', where=where)
    return int(m.group(1)), int(m.group(2))


def format_capability(cap: Optional[Tuple[int, int]]) -> Optional[str]:
    return None if cap is None else f"{cap[0]}.{cap[1]}"


def contains(spec: SpecifierSet, version: Version) -> bool:
    """Whether `version` satisfies `spec`, pre-releases and local labels included.

    A local label (torch 2.11.0+cu130) must not hide the release from a specifier, so the
    comparison uses the public version.
    """
    return spec.contains(Version(version.public) if version.local else version, prereleases=True)
