"""``iotool.Loader``: batches built by threads, straight into reused memory.

The package, from the top: :mod:`.api` (:class:`Loader`), the passes (:mod:`.isolated`: the pass in
a forked child; :mod:`.threadpass`: the threads in this process) and their iterator
(:mod:`.batches`), the rings (:mod:`.sharedring` over :mod:`.batchring`), how a sample is
computed (:mod:`.reading`; a mix's by its sources', :mod:`.mixreading`), a state and where it
resumes (:mod:`.resume`), and the seams they meet through (:mod:`.protocols`: ``Pass``,
``Ring``, ``SampleSource``, ``OrderedDataset``, ``PassPlan``). The epoch's order is
:mod:`iotool.loading.order`, shared with the datasets.
"""

from .api import MAX_THREADS, ON_ERROR, Loader, default_threads
from .resume import STATE_VERSION

__all__ = ["MAX_THREADS", "ON_ERROR", "STATE_VERSION", "Loader", "default_threads"]
