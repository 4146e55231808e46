"""iotool.tune."""
