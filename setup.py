"""The one mapping pyproject.toml cannot express: ``resources/`` travels inside the wheel.

Each code folder holds one package folder of the same name as its import (``core/picocontext``,
``diagnostics/picocontext_diagnostics``, ``playground/picocontext_playground``), so the code
needs no mapping beyond "this package lives in that folder". The run-time data (fixtures,
corpora, manifests, schemas) ships as ``picocontext_diagnostics/resources``; a source checkout
or an editable install reads the top-level ``resources/`` folder instead (both lookups are in
the code). Which files: the package-data globs in pyproject.toml.
"""

from setuptools import find_namespace_packages, find_packages, setup

ROOTS = ("core", "diagnostics", "playground")
DATA = "picocontext_diagnostics.resources"

# Every folder under resources/ is a data package of its own: setuptools warns, once per
# folder, about importable folders that no ``packages`` entry names.
packages = [DATA, *(f"{DATA}.{name}" for name in find_namespace_packages(where="resources"))]
package_dir = {DATA: "resources"}
for root in ROOTS:
    found = find_packages(where=root)
    packages += found
    package_dir.update({name: f"{root}/{name}" for name in found if "." not in name})

setup(packages=packages, package_dir=package_dir)
