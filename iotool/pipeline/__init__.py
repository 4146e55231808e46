"""Conversion, one job per module: ``sources`` -> ``prepare`` -> ``pool`` -> writer ->
``destination``; ``resume`` keeps checkpoints; ``run.convert`` checks options and dispatches to an
engine (:mod:`iotool.pipeline.engines`). Nothing is imported until a submodule is used."""
