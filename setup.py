"""Build the optional C extension; all metadata is in pyproject.toml.

``iotool._jpegregion`` decodes only the region of a JPEG that a crop needs (see
``iotool/decode/region.py``). It needs a C compiler and the libjpeg API headers (jpeglib.h;
Debian/Ubuntu: ``apt-get install gcc libjpeg-dev``) to build. It does not link a libjpeg: at
import it binds with dlopen the newest libjpeg-turbo at hand, the 3.x that Pillow's wheel bundles
(``pillow.libs``), else the system's ``libjpeg.so.62``. Without a compiler or the headers the
build prints a warning, installs iotool without it, and crops fall back to a full decode.

``iotool._resize`` is the antialiased bilinear uint8 resize of the transforms (see
``iotool/transforms/kernels.py``), bit-exact with torch's kernel and faster on crops. It needs
only a C compiler; without one, the transforms use torch's kernel.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "iotool._jpegregion",
            sources=["iotool/_jpegregion.c"],
            libraries=["dl"],  # dlopen (part of libc since glibc 2.34; libdl before)
            optional=True,
        ),
        Extension(
            "iotool._resize",
            sources=["iotool/_resize.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
