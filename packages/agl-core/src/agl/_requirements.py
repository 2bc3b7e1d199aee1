"""Whether an installed distribution's declared requirements are met by what is installed.

A plugin installed alongside other packages can be left broken without a word: installing
``langgraph langchain-openai`` after ``agl-langchain`` may move ``langchain-core`` past the
range agl-langchain declares, and the adapter then fails at run time in ways that do not name
the cause. ``agl plugins`` and the runner's instrumentors ask this module first and say which
requirement is off (``pip check`` does the same for every installed package).

A requirement applies when its environment marker holds for this interpreter and platform;
one marked with an extra (``; extra == "server"``) applies when something checked here asks for
the distribution with that extra (``agl-core[server]`` in another one's requirements), since an
installed distribution does not record which extras its installer asked for.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from packaging.requirements import Requirement

__all__ = ["UnmetRequirement", "unmet_requirements", "warn_unmet", "warn_unmet_of_package"]

ENTRY_POINT_GROUP: Final = "agl.plugins"
"""The entry point group agl plugins register under (:data:`agl.plugins.ENTRY_POINT_GROUP`)."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnmetRequirement:
    """One declared requirement that what is installed does not meet."""

    distribution: str
    """The distribution that declares it."""
    name: str
    """The required distribution."""
    specifier: str
    """The versions it allows (``">=1.7,<1.7.5"``; empty: any)."""
    installed: str | None
    """The installed version, None when it is missing."""

    def __str__(self) -> str:
        required = f"{self.name}{self.specifier}" if self.specifier else self.name
        return f"{required} (installed: {self.installed or 'missing'})"


@functools.cache
def unmet_requirements(
    distribution: str, extras: tuple[str, ...] = ()
) -> tuple[UnmetRequirement, ...]:
    """The requirements of the installed ``distribution`` (with ``extras``) that are not met.

    Each requirement that asks for a dependency's extras (``agl-core[server]``) brings that
    dependency's requirements for those extras along. Cached: installing packages while a
    process runs is not something it sees.

    Raises:
        importlib.metadata.PackageNotFoundError: ``distribution`` is not installed.
    """
    unmet: list[UnmetRequirement] = []
    _check(distribution, frozenset(extras), unmet, set())
    return tuple(dict.fromkeys(unmet))


def _check(
    distribution: str,
    extras: frozenset[str],
    unmet: list[UnmetRequirement],
    seen: set[tuple[str, frozenset[str]]],
) -> None:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    seen.add((canonicalize_name(distribution), extras))
    for line in importlib.metadata.distribution(distribution).requires or ():
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue  # metadata pip itself would refuse; not this check's to report
        if requirement.marker is not None and not any(
            requirement.marker.evaluate({"extra": extra}) for extra in ("", *sorted(extras))
        ):
            continue
        installed = _version(requirement.name)
        if installed is None or not _allows(requirement, installed):
            specifier = str(requirement.specifier)
            unmet.append(UnmetRequirement(distribution, requirement.name, specifier, installed))
            continue
        wanted = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if requirement.extras and wanted not in seen:
            _check(requirement.name, wanted[1], unmet, seen)


def _allows(requirement: Requirement, version: str) -> bool:
    from packaging.version import InvalidVersion

    try:
        return requirement.specifier.contains(version, prereleases=True)
    except InvalidVersion:  # a version PEP 440 cannot read: nothing to compare it with
        return True


def warn_unmet(distribution: str, what: str) -> tuple[UnmetRequirement, ...]:
    """Log one warning naming each unmet requirement of ``distribution`` (before ``what``
    uses it, e.g. "instrumentor 'langchain'"); return them. Silent when it is not installed
    as a distribution (a plugin given in code)."""
    try:
        unmet = unmet_requirements(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ()
    if unmet:
        logger.warning(
            "%s comes from %s, whose requirements are not met: %s; it may fail or misbehave. "
            "Install versions it allows (`agl plugins` lists what is off).",
            what,
            distribution,
            "; ".join(map(str, unmet)),
        )
    return unmet


def warn_unmet_of_package(package: str, what: str) -> tuple[UnmetRequirement, ...]:
    """:func:`warn_unmet` for the distribution whose ``agl.plugins`` entry point lives in the
    import package ``package`` (an adapter's own ``instrument``); none for a package that is
    no installed plugin's."""
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.module.split(".")[0] == package and entry_point.dist is not None:
            return warn_unmet(entry_point.dist.name, what)
    return ()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
