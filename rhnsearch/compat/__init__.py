"""What rhnsearch uses of torch, Ray and MLflow beyond their public API, one module per library
(torch.py, ray.py, mlflow.py): private ops and attributes, internal modules, the layout of
their saved state, their file names and their database tables. No other module of the package
touches these (tests/test_layout.py checks), so that an upgrade of a library is checked here.

Each module names the versions of its library it was tested on (SUPPORTED). An internal is
used only where the installed version is in that range: the first use out of it either
raises a one-line UserError naming both (`require`) or, where a public way does the same
more slowly, says so in one warning line and takes that way (`tested`). Importing rhnsearch
checks nothing, so commands that use no internal work with any version.
"""

import functools
import importlib.metadata
import logging

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..errors import UserError

log = logging.getLogger(__name__)


@functools.cache
def installed(distribution: str) -> str:
    """The installed version of `distribution` (a name as pip knows it)."""
    return importlib.metadata.version(distribution)


@functools.cache
def in_range(distribution: str, supported: str) -> bool:
    """Whether the installed `distribution` is in the range `supported` (">=2.60,<2.61")."""
    return SpecifierSet(supported).contains(Version(installed(distribution)), prereleases=True)


def untested(distribution: str, supported: str, what: str) -> str:
    """One line saying that `what` is used with a version of `distribution` outside
    `supported`."""
    return (
        f"{distribution} {installed(distribution)} is installed, but rhnsearch's use of "
        f"{what} is tested on {distribution}{supported} only (rhnsearch/compat/)"
    )


def require(distribution: str, supported: str, what: str):
    """Raise a one-line UserError unless the installed `distribution` is in `supported`."""
    if not in_range(distribution, supported):
        raise UserError(
            f"{untested(distribution, supported, what)}: install '{distribution}{supported}'"
        )


@functools.cache
def tested(distribution: str, supported: str, what: str, instead: str) -> bool:
    """Whether the installed `distribution` is in `supported`; where not, one warning line
    (once) says that `instead`, the public way, is taken."""
    if in_range(distribution, supported):
        return True
    log.warning("%s: %s", untested(distribution, supported, what), instead)
    return False
