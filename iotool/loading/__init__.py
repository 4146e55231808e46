"""iotool.loading."""
