"""Build the optional C extension; all metadata is in pyproject.toml.

``iotool._jpegregion`` decodes only the region of a JPEG that a crop needs (see
``iotool/decode/region.py``). It needs a C compiler and the libjpeg-turbo headers
(Debian/Ubuntu: ``apt-get install gcc libjpeg-dev``). Without them the build prints a warning,
installs iotool without it, and crops fall back to a full decode.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "iotool._jpegregion",
            sources=["iotool/_jpegregion.c"],
            libraries=["jpeg"],
            optional=True,
        )
    ]
)
