"""Build the optional C extensions; all metadata is in pyproject.toml.

Their sources live in ``csrc/``, beside the package (as Pillow keeps its C in ``src/`` beside
``src/PIL``): each builds a module of the package (``iotool._resize``, ...), but no C file is part of
what is installed. ``tests/native/test_include_graph.py`` keeps their includes a graph without cycles.

``iotool._jpegregion`` decodes only the region of a JPEG that a crop needs (see
``iotool/decode/region.py``). It needs a C compiler and the libjpeg API headers (jpeglib.h;
Debian/Ubuntu: ``apt-get install gcc libjpeg-dev``) to build. It does not link a libjpeg: at
import it binds with dlopen the newest libjpeg-turbo at hand, the 3.x that Pillow's wheel bundles
(``pillow.libs``), else the system's ``libjpeg.so.62``. Without a compiler or the headers the
build prints a warning, installs iotool without it, and crops fall back to a full decode.

``iotool._resize`` is the antialiased bilinear uint8 resize of the transforms (see
``iotool/transforms/kernels.py``), bit-exact with torch's kernel and faster on crops. It needs
only a C compiler; without one, the transforms use torch's kernel.

``iotool._readfile`` reads a dataset's regular file whole, or one record's range of a shard, in
one call, releasing the GIL twice instead of at every system call (see ``iotool/storage/files.py``,
``read_regular`` and ``read_range_inside``, and a run of either: ``read_regular_many``); without
it the same steps run in Python.

``iotool._tfrecord`` finds the image bytes of a run of framed TFRecord records (CRC32C with the
CPU's SSE4.2 instruction, the ``tf.train.Example`` walked as ``formats/tfrecord/example.py`` walks
it) with the GIL released; without it, or without SSE4.2, each record is parsed in Python.

``iotool._masks`` decodes a run's masks stored as one-channel PNGs and moves them as their images
moved, with the GIL released (see ``iotool/loading/targets.py``). It needs zlib's headers
(Debian/Ubuntu: ``apt-get install zlib1g-dev``); without it masks are decoded by Pillow.

``iotool._boxes`` parses a run's stored boxes (the canonical JSON iotool writes) with the GIL
released (see ``iotool/fields/kinds/boxes.py``); without it, or for any other JSON, Python's
``json`` does.

All use only CPython's limited API (the stable ABI) of the oldest CPython that pyproject.toml's
``requires-python`` admits: one wheel, tagged ``cp3X-abi3``, serves that CPython and every newer
one.
"""

import glob
import re
import tomllib  # Python >= 3.11, as requires-python says

from setuptools import Extension, setup


def oldest_python() -> tuple[int, int]:
    """The oldest CPython supported: pyproject.toml's ``requires-python = ">=3.X"``."""
    with open("pyproject.toml", "rb") as file:
        requires = tomllib.load(file)["project"]["requires-python"]
    found = re.fullmatch(r">=\s*(\d+)\.(\d+)", requires.strip())
    if found is None:
        raise SystemExit(f"pyproject.toml: requires-python = {requires!r}: setup.py reads only '>=3.X'")
    return int(found[1]), int(found[2])


# The buffer protocol that the extensions take their arguments through is in the limited API
# from 3.11, so requires-python cannot go below that.
LIMITED_API = oldest_python()
STABLE_ABI = {
    "define_macros": [("Py_LIMITED_API", f"0x{LIMITED_API[0]:02X}{LIMITED_API[1]:02X}0000")],
    "py_limited_api": True,
}

# The resize kernel, its flip, the augmentations' draws and a sample's crop into its batch row: C
# without Python, compiled into iotool._resize and into iotool._jpegregion (its runs of JPEGs).
RESIZE_KERNEL = [
    "csrc/_resize_cpu.c",
    "csrc/_resize_kernel.c",
    "csrc/_resize_weights.c",
    "csrc/_resize_horizontal.c",
    "csrc/_resize_vertical.c",
    "csrc/_resize_flip.c",
    "csrc/_resize_draw.c",
    "csrc/_resize_run.c",
]

# A file's header declares what it defines (csrc/_resize_kernel.h for _resize_kernel.c); the types
# an extension's files share are in its _common.h. A change to any header rebuilds both.
HEADERS = sorted(glob.glob("csrc/*.h"))

setup(
    ext_modules=[
        Extension(
            "iotool._jpegregion",
            sources=[  # one module, a file per concept (csrc/_jpegregion.c says which)
                "csrc/_jpegregion.c",
                "csrc/_jpegregion_errors.c",
                "csrc/_jpegregion_decode.c",
                "csrc/_jpegregion_transcode.c",
                "csrc/_jpegregion_gather.c",
                "csrc/_jpegregion_run.c",
                *RESIZE_KERNEL,  # for the runs of JPEG samples
            ],
            depends=HEADERS,
            extra_compile_args=["-O3"],
            libraries=["dl"],  # dlopen (part of libc since glibc 2.34; libdl before)
            optional=True,
            **STABLE_ABI,
        ),
        Extension(
            "iotool._resize",
            sources=[  # one module, a file per concept (csrc/_resize.c says which)
                "csrc/_resize.c",
                "csrc/_resize_runs.c",
                *RESIZE_KERNEL,
            ],
            depends=HEADERS,
            extra_compile_args=["-O3"],
            optional=True,
            **STABLE_ABI,
        ),
        Extension(
            "iotool._readfile",
            sources=["csrc/_readfile.c"],
            optional=True,
            **STABLE_ABI,
        ),
        Extension(
            "iotool._masks",
            sources=["csrc/_masks.c", "csrc/_masks_png.c", "csrc/_masks_move.c"],
            depends=HEADERS,
            extra_compile_args=["-O3"],
            libraries=["z"],  # zlib: the PNGs' data
            optional=True,
            **STABLE_ABI,
        ),
        Extension(
            "iotool._boxes",
            sources=["csrc/_boxes.c"],
            extra_compile_args=["-O3"],
            optional=True,
            **STABLE_ABI,
        ),
        Extension(
            "iotool._tfrecord",
            sources=[  # one module, a file per concept (csrc/_tfrecord.c says which)
                "csrc/_tfrecord.c",
                "csrc/_tfrecord_crc.c",
                "csrc/_tfrecord_example.c",
                "csrc/_tfrecord_record.c",
            ],
            depends=HEADERS,
            extra_compile_args=["-O3"],
            optional=True,
            **STABLE_ABI,
        ),
    ],
    options={"bdist_wheel": {"py_limited_api": f"cp{LIMITED_API[0]}{LIMITED_API[1]}"}},
)
