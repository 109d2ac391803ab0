"""koboi test fixtures and contract suites.

The fixtures come from the pytest plugin (:mod:`koboi_testing.pytest_plugin`),
loaded automatically once this package is installed; the suites are in
:mod:`koboi_testing.contracts`.
"""

from koboi_testing._version import __version__

__all__ = ["__version__"]
