"""Package discovery for the package-dir mapping (pyproject.toml holds all other metadata).

setuptools cannot discover subpackages of a renamed folder on its own, so list them here:
every folder with an ``__init__.py`` under core/, diagnostics/ and playground/.
"""

from setuptools import find_packages, setup

ROOTS = {
    "picocontext": "core",
    "picocontext_diagnostics": "diagnostics",
    "picocontext_playground": "playground",
}

packages = []
for name, folder in ROOTS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(where=folder)]

# Data the diagnostics and the manifest schema need at run time travel inside the wheel as
# ``picocontext_diagnostics/resources`` (a source checkout or an editable install reads the
# top-level resources/ folder instead; both lookups are in the code). Which files: pyproject.toml.
DATA = "picocontext_diagnostics.resources"
packages.append(DATA)
package_dir = {**ROOTS, DATA: "resources"}

setup(packages=packages, package_dir=package_dir)
