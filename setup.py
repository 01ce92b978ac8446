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

setup(packages=packages, package_dir=ROOTS)
