"""Fields: what a sample holds besides its image (captions, JSON, numeric targets, arrays,
extra payloads, boxes), the schema that names them, their stored bytes and their bounds.

Each kind is one class (:mod:`.kinds`), registered once. Ground floor: formats, both wings and the
CLI use it; it imports only :mod:`iotool.errors` and :mod:`iotool.registry`.
"""

from .bounded import dump_npy, load_npy, npy_header, parse_json, parse_metadata_json
from .codec import check, decode, encode, encode_fields, record_checksum
from .limits import MAX_ENCODED_BYTES, MAX_UNIQUE_CLASS_VALUES
from .observe import SchemaObserver
from .schema import (
    BOX_FORMATS,
    CLASS,
    IMAGE,
    KINDS,
    FieldSpec,
    Schema,
    kind_for_extension,
    name_problem,
    pickle_problem,
)

__all__ = [
    "BOX_FORMATS",
    "CLASS",
    "IMAGE",
    "KINDS",
    "MAX_ENCODED_BYTES",
    "MAX_UNIQUE_CLASS_VALUES",
    "FieldSpec",
    "Schema",
    "SchemaObserver",
    "check",
    "decode",
    "dump_npy",
    "encode",
    "encode_fields",
    "kind_for_extension",
    "load_npy",
    "name_problem",
    "npy_header",
    "parse_json",
    "parse_metadata_json",
    "pickle_problem",
    "record_checksum",
]
