"""iotool.formats.sharded."""
