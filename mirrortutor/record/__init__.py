"""Recording: drop-in ``tf.distribute`` strategies that write down what TensorFlow did.

- :mod:`.records`, :mod:`.trace`: what is recorded, as plain numpy records (no TensorFlow);
  :mod:`.report` says it in plain words, :mod:`.persist` writes it to a file and reads it back;
- :mod:`.values`: which values of a ``strategy.run`` can be kept, found by name (``index``);
- :mod:`.gate`: getting values out of a running graph on sampled steps, without changing them;
- :mod:`.strategy`: the recording around ``strategy.run`` that every instrumented strategy shares;
- :mod:`.crossdevice`: what is recorded of each all-reduce;
- :mod:`.mirrored`, :mod:`.multiworker`: ``mt.MirroredStrategy`` and
  ``mt.MultiWorkerMirroredStrategy``;
- :mod:`.parameter_server`, :mod:`.ps_trace`: ``mt.ParameterServerStrategy`` and
  ``mt.ClusterCoordinator``, and the placement and scheduled-function log they record;
- :mod:`.tf_internals` (the strategies' half) and :mod:`.tf_internals.cluster` (the clusters'
  half): the one wall behind which every use of TensorFlow's private API lives.

Nothing is imported here.
"""
