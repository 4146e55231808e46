"""What two datasets share, or one holds twice: ``iotool overlap`` (:mod:`iotool.analysis.overlap`).

Reads datasets through the formats' readers only (no loading wing): a pass over each dataset's
stored payloads, one digest a record (:mod:`iotool.decode.identity`).
"""
