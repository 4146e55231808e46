"""The read wing: a converted dataset's records on their way to the GPU.

The modules, in the order data flows: ``opening`` (``open_dataset``, ``open_reader``: detect the
format, build the dataset), ``iterable`` (``ShardedIterableDataset``: sharded formats, each
epoch split by ``split`` over ranks and workers), ``mapstyle`` (``ImageDataset``:
decoding, fused decoding, bad records), ``ramcache`` and ``memory`` (the shared RAM cache of
decoded images and its memory check), ``collate`` (``fast_collate``), ``prefetch``
(``CUDAPrefetcher``) and ``normalization`` (its mean/std rule), ``dali`` (the DALI pipeline),
``verify`` (``iotool verify``), ``order`` (``EpochOrder``: the one owner of an epoch's order,
used by both dataset kinds and the Loader), and the ``loader`` package (``iotool.Loader``: its
passes and rings behind the protocols of ``loader.protocols``). ``batchring``, ``sharedring``,
``threadpass`` and ``isolated`` are deprecated re-exports of the loader package's modules.
"""
